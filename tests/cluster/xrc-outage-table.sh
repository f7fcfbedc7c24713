#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Not part of make check (it runs for about 20 minutes): the figures behind docs/benchmarks.md's table of outages.
# For each outage length (OUTAGE_TABLE_LENGTHS, seconds: 1 10 30 45 60 120 by default) nodeB's port goes down once
# under steady verified traffic at 2 nodes x 2 ranks with every transport's defaults (the HCA's retry budget 34 s):
# xrc with btl_xrc_outage_limit 300, then openib (Open MPI 4.1 only) and UCX rc_v when this Open MPI has them, one
# after the other on the same nodes. One line per run: survived or not (exit status, steady's verdict), the longest
# pause of the traffic and how long after the port came up it flowed again, or the first error line.
# XRC_TEST_RAILS=2: two rails (simcluster up --rails 2), every port of nodeB down at once (its last rail too);
# OUTAGE_TABLE_ONLY="xrc ...": only those transports.
# Run: make -C build/tests/cluster check TESTS=xrc-outage-table.sh (root).
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2

ompi_info=$(dirname "$(command -v "$MPIRUN")")/ompi_info
transports=("xrc|--mca pml ob1 --mca btl self,vader,xrc --mca btl_xrc_outage_limit 300")
ompi_components=$("$ompi_info" --parsable 2>/dev/null)  # read whole: grep -q on a pipe would SIGPIPE it
if grep -q '^mca:btl:openib:' <<<"$ompi_components"; then
    transports+=("openib|--mca pml ob1 --mca btl self,vader,openib --mca btl_openib_allow_ib 1 --mca btl_openib_warn_no_device_params_found 0")
fi
if grep -q '^mca:pml:ucx:' <<<"$ompi_components"; then
    transports+=("ucx-rc|--mca pml ucx --mca btl self,vader -x UCX_TLS=rc_v,self,sm")
fi
for down in ${OUTAGE_TABLE_LENGTHS:-1 10 30 45 60 120}; do
    for entry in "${transports[@]}"; do
        name=${entry%%|*} args=${entry#*|}
        [ -z "${OUTAGE_TABLE_ONLY:-}" ] || [[ " $OUTAGE_TABLE_ONLY " == *" $name "* ]] || continue
        STEADY_BURST=16 MPIRUN_TIMEOUT=$((down + 180)) flapped_run "$WORKDIR/$name-$down" nodeA:2,nodeB:2 "$args" 4 "$down"
        out=$WORKDIR/$name-$down
        if [ "$rc" = noflow ]; then
            info "table: $name ${down}s: no traffic within 60 s"
            continue
        fi
        verdict=$(grep -a -m1 -E '^steady: (OK|FAILED)' "$out") || verdict="no verdict"
        pause=$(grep -a -m1 '^steady: longest pause' "$out" | awk -v up="$up_at" '{ printf "pause %.1f s, flowing %.2f s after port-up", $4, $8 - up }')
        if [ "$rc" = 0 ] && [[ "$verdict" == "steady: OK"* ]]; then
            info "table: $name ${down}s: survived: $verdict; $pause"
        else
            first=$(grep -a -m1 -iE 'btl:xrc: .*(more than|failed|error)|completion with error|retry|error' "$out" | cut -c1-200)
            info "table: $name ${down}s: ended (exit $rc, $elapsed s after the port went down): ${first:-$verdict}"
        fi
    done
done
sleep 1
expect_no_objects
info "PASS"
