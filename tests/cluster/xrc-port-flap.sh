#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. A port that goes down and comes back (a link flap) is
# ridden through: verified all-to-all traffic at 2x2 while nodeB's port goes down for 0.5 s and then 2 s; the job
# completes with every byte verified, and nodeB's ranks counted each hold and resume (their counters at finalize).
# A port that stays down longer than btl_xrc_port_down_grace ends the job with a message naming host, device and
# port. Open MPI's openib over the same flaps is a comparison line when this Open MPI has it. Nothing stays in any
# node's HCA afterwards.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2

# flapped_run OUT BTLS SECONDS DOWN... : steady traffic on nodeA:2,nodeB:2 over BTLS for SECONDS at least and until
# the flaps are over: once it flows, nodeB's port goes down for each DOWN seconds in turn (1 s apart), and the job
# runs on for 1 s after the last. Leaves the job's exit status in $rc (noflow: no traffic within 60 s; the job is
# then left to MPIRUN_TIMEOUT)
# and the seconds from the last port-down to the job's end in $elapsed.
flapped_run() {
    local out=$1 btls=$2 seconds=$3 down start
    shift 3
    rm -f "$WORKDIR/stop" "$WORKDIR/ended"
    (
        xrc_run "$out" nodeA:2,nodeB:2 "$btls" "$MPI_DIR/steady" "$seconds" "$WORKDIR/stop"
        status=$?
        date +%s.%N >"$WORKDIR/ended"
        exit $status
    ) &
    local job=$!
    if ! wait_for_line "$out.raw" '^steady: traffic' 60; then
        wait $job  # until MPIRUN_TIMEOUT stops it, so that nothing of it is left on the nodes
        rc=noflow elapsed=0
        return
    fi
    for down in "$@"; do
        sleep 1
        start=$(date +%s.%N)
        sc exec nodeB "$SIMHCA_CTL" fault port-down >/dev/null || die "port-down failed"
        info "nodeB's port down at $(date +%T.%N | cut -c1-12) for $down s"
        sleep "$down"
        sc exec nodeB "$SIMHCA_CTL" fault port-up >/dev/null || die "port-up failed"
        info "nodeB's port up at $(date +%T.%N | cut -c1-12)"
    done
    sleep 1
    touch "$WORKDIR/stop"
    wait $job
    rc=$?
    elapsed=$(echo "$(cat "$WORKDIR/ended") - $start" | bc)
}

# Ridden through: 0.5 s and 2 s down, default grace (the retry budget, 34 s).
XRC_MPIRUN_ARGS="--mca btl_xrc_verbose 10" flapped_run "$WORKDIR/out" self,vader,xrc 4 0.5 2
[ $rc != noflow ] || die "no traffic in the xrc job"
[ $rc = 0 ] || die "the job did not ride through the flaps (exit $rc)"
expect_line "$WORKDIR/out" '^steady: OK .*errors=0' "xrc, nodeB's port down 0.5 s and 2 s"
grep -q 'btl:xrc: nodeB: simhca0:1: the port went down' "$WORKDIR/out" || die "no message naming the port going down"
grep -q 'btl:xrc: nodeB: simhca0:1: the port is active again' "$WORKDIR/out" || die "no message naming the port back"
holds=$(paste <(counter "$WORKDIR/out" port_downs) <(counter "$WORKDIR/out" port_ups) | grep -c '^2	2$')
[ "$holds" = 2 ] || die "$holds of nodeB's 2 ranks counted 2 holds and 2 resumes"
info "held and resumed twice on both of nodeB's ranks: $(paste -d' ' <(counter "$WORKDIR/out" port_downs) \
    <(counter "$WORKDIR/out" port_ups) <(counter "$WORKDIR/out" port_down_ms) | grep '^2 2 ' |
    awk '{ printf " port_downs=%s port_ups=%s port_down_ms=%s;", $1, $2, $3 }')"
grep -q 'btl:xrc: .* error\|MPI_ABORT\|btl:xrc: .*failed' "$WORKDIR/out" && die "an error was reported during the flaps"

# Down longer than the grace: the job ends, naming host, device and port.
MPIRUN_TIMEOUT=60 XRC_MPIRUN_ARGS="--mca btl_xrc_port_down_grace 2" flapped_run "$WORKDIR/long" self,vader,xrc 30 5
[ $rc != noflow ] || die "no traffic in the xrc job with a 2 s grace"
[ $rc != 0 ] && [ $rc != 124 ] || die "a port down past the grace did not end the job cleanly (exit $rc)"
grep -q 'btl:xrc: nodeB: simhca0:1: the port has been down for more than 2 s' "$WORKDIR/long" ||
    die "no message naming host, device, port and the grace"
info "port down 5 s with a 2 s grace: the job ended (exit $rc), $elapsed s after the port went down:" \
    "$(grep -m1 'btl:xrc: nodeB: simhca0:1: the port has been down' "$WORKDIR/long")"

# Comparison: openib over the same flaps (Open MPI 4.1 only).
if "$(dirname "$(command -v "$MPIRUN")")/ompi_info" --parsable 2>/dev/null | grep -q '^mca:btl:openib:'; then
    MPIRUN_TIMEOUT=70 XRC_MPIRUN_ARGS="--mca btl_openib_allow_ib 1 --mca btl_openib_warn_no_device_params_found 0" \
        flapped_run "$WORKDIR/openib" self,vader,openib 4 0.5 2
    if [ $rc = noflow ]; then
        info "comparison: openib carried no traffic within 60 s (a comparison, not a check)"
    else
        info "comparison: openib, nodeB's port down 0.5 s and 2 s: exit $rc," \
            "$(grep -m1 -E '^steady: (OK|FAILED)' "$WORKDIR/openib" || echo 'no result line')"
    fi
fi
sleep 1
expect_no_objects
info "PASS"
