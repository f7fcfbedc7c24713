#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# btl xrc's MPI_T performance variables on the software HCA (one node, xrc carries on-node traffic through the
# HCA's loopback): tests/mpi/pvars finds every btl_xrc_ variable with its class and description, sees none move
# while no message goes to or from a rank, sees them move with 64 eager messages and one 1 MiB message (RDMA)
# between every pair, and their sums agree across the job (sent = received on each path, byte for byte; every
# eager ring request answered); with osc/rdma over xrc, one fetch-and-add per peer counts as an atomic.
. "$(dirname "$0")/common.sh"
start_daemon
for np in 2 3; do
    run_check "pvars $np ranks self,xrc" '^pvars: OK .*errors=0' -np $np --mca btl self,xrc "$MPI/pvars" --onnode-xrc
done
run_check "pvars 3 ranks self,xrc, osc/rdma atomics" '^pvars: OK .*errors=0' -np 3 --mca btl self,xrc \
    --mca osc rdma --mca osc_rdma_btls xrc "$MPI/pvars" --onnode-xrc --atomics
finish
