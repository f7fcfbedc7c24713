#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. btl xrc across simulated nodes: allpairs (every pair,
# 0 B .. 4 MiB over the eager, send and RDMA-get paths, verified, nonblocking storm with ANY_SOURCE) on 2x2,
# 4x2 and three nodes with 1, 2 and 3 ranks; to 16 MiB over RGET and over RPUT + pipeline between two nodes;
# also with xrc for on-node peers (self,xrc: the HCA's loopback).
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 4 3
for hosts in nodeA:2,nodeB:2 nodeA:2,nodeB:2,nodeC:2,nodeD:2 nodeA:1,nodeB:2,nodeC:3; do
    xrc_run "$WORKDIR/out" "$hosts" self,vader,xrc "$MPI_DIR/allpairs" --expect "$hosts" ||
        die "allpairs on $hosts over self,vader,xrc failed"
    expect_line "$WORKDIR/out" '^allpairs: OK .*errors=0' "allpairs $hosts self,vader,xrc"
done
xrc_run "$WORKDIR/out" nodeA:1,nodeB:1 self,vader,xrc "$MPI_DIR/allpairs" --max-size 16777216 ||
    die "allpairs to 16 MiB failed"
expect_line "$WORKDIR/out" '^allpairs: OK .*errors=0' "allpairs nodeA:1,nodeB:1 to 16 MiB (RGET)"
XRC_MPIRUN_ARGS="--mca btl_xrc_flags send,put,inplace" \
    xrc_run "$WORKDIR/out" nodeA:1,nodeB:1 self,vader,xrc "$MPI_DIR/allpairs" --max-size 16777216 ||
    die "allpairs to 16 MiB with put only failed"
expect_line "$WORKDIR/out" '^allpairs: OK .*errors=0' "allpairs nodeA:1,nodeB:1 to 16 MiB (RPUT, pipeline)"
xrc_run "$WORKDIR/out" nodeA:2,nodeB:1 self,xrc "$MPI_DIR/allpairs" --expect nodeA:2,nodeB:1 ||
    die "allpairs over self,xrc failed"
expect_line "$WORKDIR/out" '^allpairs: OK .*errors=0' "allpairs nodeA:2,nodeB:1 self,xrc"
expect_no_objects
info "PASS"
