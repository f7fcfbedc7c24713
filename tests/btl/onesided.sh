#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# MPI one-sided through osc/rdma over btl xrc (RDMA write/read, fetch-and-add, compare-and-swap, flush):
# put, get, accumulate, fetch_and_op, compare_and_swap with fence and lock/unlock, all values checked.
# vader keeps on-node sends (HIGH exclusivity), xrc is the RDMA BTL for every peer.
. "$(dirname "$0")/common.sh"
start_daemon
for np in 2 3; do
    run_check "onesided $np ranks" '^onesided: OK .*errors=0' -np $np --mca btl self,vader,xrc --mca osc rdma \
        --mca osc_rdma_btls xrc "$MPI/onesided"
done
run_check "onesided 2 ranks self,xrc" '^onesided: OK .*errors=0' -np 2 --mca btl self,xrc --mca osc rdma \
    --mca osc_rdma_btls xrc "$MPI/onesided"
finish
