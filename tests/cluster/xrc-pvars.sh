#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. btl xrc's MPI_T counters across simulated nodes
# (tests/mpi/pvars): every variable present, still while no message goes to or from a rank, moving with the
# traffic, adding up across the job, and connections_open = one INI QP per other node + one TGT QP per remote
# sender; on 2x2 with vader for on-node peers, on three nodes with 1, 2 and 3 ranks with osc/rdma atomics, and with
# xrc for on-node peers too (the loopback pair).
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 3 3
xrc_run "$WORKDIR/out" nodeA:2,nodeB:2 self,vader,xrc "$MPI_DIR/pvars" || die "pvars on 2x2 failed"
expect_line "$WORKDIR/out" '^pvars: OK .*connections=3 errors=0' "pvars nodeA:2,nodeB:2 self,vader,xrc"
XRC_MPIRUN_ARGS="--mca osc rdma --mca osc_rdma_btls xrc" \
    xrc_run "$WORKDIR/out" nodeA:1,nodeB:2,nodeC:3 self,vader,xrc "$MPI_DIR/pvars" --atomics ||
    die "pvars on 1/2/3 with atomics failed"
expect_line "$WORKDIR/out" '^pvars: OK .*errors=0' "pvars nodeA:1,nodeB:2,nodeC:3 self,vader,xrc, osc/rdma"
xrc_run "$WORKDIR/out" nodeA:2,nodeB:1 self,xrc "$MPI_DIR/pvars" --onnode-xrc || die "pvars over self,xrc failed"
expect_line "$WORKDIR/out" '^pvars: OK .*errors=0' "pvars nodeA:2,nodeB:1 self,xrc"
expect_no_objects
info "PASS"
