#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. Collectives (alltoall, allreduce, bcast, verified) and
# MPI one-sided through osc/rdma with xrc as the RDMA BTL for every peer (put, get, accumulate, fetch_and_op,
# compare_and_swap, fence, lock/unlock, flush) across simulated nodes, at 2x2, 4x2 and three unequal nodes.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 4 3
for hosts in nodeA:2,nodeB:2 nodeA:2,nodeB:2,nodeC:2,nodeD:2 nodeA:1,nodeB:2,nodeC:3; do
    colls_and_onesided "$hosts" ""
done
expect_no_objects
info "PASS"
