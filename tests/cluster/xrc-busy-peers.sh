#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. Peers that compute: every rank but 0 computes 10 s
# without calling MPI right after MPI_Init while rank 0 sends each of them an int, with btl_xrc_connect_timeout 5;
# the sends complete (the peers' service threads answer the connection requests), with no error, and every
# receiver gets its value. On demand (the first message makes the connection) and eager (connections started in
# MPI_Init, answered while the owners compute), on 2 nodes x 2 ranks.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2
for mode in on-demand eager; do
    XRC_MPIRUN_ARGS="--mca btl_xrc_connect $mode --mca btl_xrc_connect_timeout 5" \
        xrc_run "$WORKDIR/out" nodeA:2,nodeB:2 self,vader,xrc "$MPI_DIR/busy_peers" 10 ||
        die "busy_peers ($mode) failed: $(grep -m3 'btl:xrc\|busy_peers' "$WORKDIR/out" | tr '\n' ' ')"
    expect_line "$WORKDIR/out" '^busy_peers: OK .*errors=0' "busy peers, $mode"
    ! grep -q 'btl:xrc: .*cannot connect\|no answer from' "$WORKDIR/out" || die "busy_peers ($mode): a connection error"
done
expect_no_objects
info "PASS"
