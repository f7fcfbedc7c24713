#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Small messages on two rails, rail failover on against off (run by hand: a benchmark, never in make check).
# Two nodes x PPN ranks, two rails of the same rate (simcluster up --rails 2); xbench mpairs at 8 bytes, the two
# settings of btl_xrc_rail_failover alternated ROUNDS times on one cluster. For each run: the message rate and what
# each rail carried (the sends and bytes every module counted at MPI_Finalize, btl_xrc_verbose 10), so the split of
# small messages between the rails is measured, not assumed (ob1 stripes them round robin over the rails' modules).
#
#   tests/bench/rail-split.sh [ROUNDS] [PPN]          (default 3 rounds, 2 ranks per node)
# Prints one line per run and a summary; rates are ratios within the run, never judged against a clock.
set -u
ROUNDS=${1:-3}
PPN=${2:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
TOP_SRCDIR=${TOP_SRCDIR:-$(cd "$HERE/../.." && pwd)}
TOP_BUILDDIR=${TOP_BUILDDIR:-$TOP_SRCDIR/build}
export TOP_SRCDIR TOP_BUILDDIR
# Open MPI's component directory (what tests/cluster's Makefile passes): the plugin is loaded beside it
OMPI_PKGLIBDIR=${OMPI_PKGLIBDIR:-$(ompi_info --path pkglibdir --parsable | cut -d: -f3)}
export OMPI_PKGLIBDIR
. "$TOP_SRCDIR/tests/cluster/common.sh"
. "$TOP_SRCDIR/tests/cluster/xrc-common.sh"
XBENCH=${XBENCH:-$TOP_BUILDDIR/tests/bench/xbench}
[ -x "$XBENCH" ] || die "xbench not built at $XBENCH"

up_cluster 2 "$PPN" --rails 2
hosts=$(hosts_spec 2 "$PPN")
printf '%-12s %5s %14s %12s %12s %10s %10s\n' failover round "msg/s (8 B)" "sends r1" "sends r2" "bytes r1" "bytes r2"
for round in $(seq "$ROUNDS"); do
    for fo in 0 1; do
        out="$WORKDIR/fo$fo.$round"
        XRC_MPIRUN_ARGS="--mca btl_xrc_verbose 10 --mca btl_xrc_rail_failover $fo" \
            xrc_run "$out" "$hosts" self,vader,xrc "$XBENCH" mpairs -m 8:8 -r 5 -t "xrc-fo$fo" >/dev/null ||
            die "xbench mpairs failed (btl_xrc_rail_failover $fo, round $round): $(tail -5 "$out")"
        # xbench,LABEL,BENCH,SIZE,METRIC,UNIT,MEDIAN,...: the median message rate at 8 bytes
        rate=$(grep -aE "^xbench,xrc-fo$fo,mpairs,8,msgrate," "$out" | cut -d, -f7 | tail -1)
        s1=$(($(counter_sum "$out" srq_sends --port 1) + $(counter_sum "$out" ring_sends --port 1)))
        s2=$(($(counter_sum "$out" srq_sends --port 2) + $(counter_sum "$out" ring_sends --port 2)))
        printf '%-12s %5s %14s %12s %12s %10s %10s\n' "$fo" "$round" "${rate:-?}" "$s1" "$s2" \
            "$(counter_sum "$out" bytes_sent --port 1)" "$(counter_sum "$out" bytes_sent --port 2)"
    done
done
