#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. MPI_THREAD_MULTIPLE across simulated nodes: 4 and 8
# threads per rank, each on its own communicator, Sendrecv of every size class (inline, eager, SRQ, rendezvous)
# with every other rank, wildcard receives and a collective per communicator, verified (tests/mpi/threads.c), on
# 2x2 and on three nodes with 1, 2 and 3 ranks, eager and on demand.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 3 3
for hosts in nodeA:2,nodeB:2 nodeA:1,nodeB:2,nodeC:3; do
    for threads in 4 8; do
        for mode in eager on-demand; do
            XRC_MPIRUN_ARGS="--mca btl_xrc_connect $mode" \
                xrc_run "$WORKDIR/out" "$hosts" self,vader,xrc "$MPI_DIR/threads" "$threads" 1 ||
                fail "threads ($hosts, $threads threads, $mode) failed: $(grep -m3 'threads:\|btl:xrc' "$WORKDIR/out" | tr '\n' ' ')"
            expect_line "$WORKDIR/out" '^threads: OK .*errors=0' "threads $hosts x $threads, $mode"
        done
    done
done
expect_no_objects
info "PASS"
