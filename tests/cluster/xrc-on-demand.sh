#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. Connections on demand (btl_xrc_connect on-demand: a
# node's connection is made by the first message for it, through the connection manager): allpairs (every pair,
# 0 B .. 4 MiB, verified, storm), collectives and one-sided over osc/rdma on 2x2, 4x2 and three nodes with 1, 2
# and 3 ranks; eager mode is what the other cluster tests run (the automatic choice at these sizes). Then the
# automatic choice itself: eager up to btl_xrc_eager_max_nodes nodes, on demand above, as each process says.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 4 3
for hosts in nodeA:2,nodeB:2 nodeA:2,nodeB:2,nodeC:2,nodeD:2 nodeA:1,nodeB:2,nodeC:3; do
    XRC_MPIRUN_ARGS="--mca btl_xrc_connect on-demand" \
        xrc_run "$WORKDIR/out" "$hosts" self,vader,xrc "$MPI_DIR/allpairs" --expect "$hosts" ||
        die "allpairs on $hosts on demand failed"
    expect_line "$WORKDIR/out" '^allpairs: OK .*errors=0' "allpairs $hosts on demand"
done
for hosts in nodeA:2,nodeB:2 nodeA:1,nodeB:2,nodeC:3; do
    colls_and_onesided "$hosts" " on demand" --mca btl_xrc_connect on-demand
done

# mode_of OUT: the connection mode every process reported (one word per process, sorted, counted)
mode_of() { grep -o 'connections \(eager\|on demand\)' "$1" | sort | uniq -c | awk '{$1=$1; print}' | paste -sd';'; }
for case in "2 eager" "1 on demand"; do
    max=${case%% *} want=${case#* }
    XRC_MPIRUN_ARGS="--mca btl_xrc_verbose 1 --mca btl_xrc_eager_max_nodes $max" \
        xrc_run "$WORKDIR/out" nodeA:2,nodeB:1 self,vader,xrc "$MPI_DIR/allpairs" --max-size 262144 ||
        die "allpairs with btl_xrc_eager_max_nodes $max failed"
    got=$(mode_of "$WORKDIR/out")
    [ "$got" = "3 connections $want" ] || die "2 nodes, btl_xrc_eager_max_nodes $max: processes said '$got'"
    info "auto, 2 nodes, btl_xrc_eager_max_nodes $max: every process connects $want"
done
expect_no_objects
info "PASS"
