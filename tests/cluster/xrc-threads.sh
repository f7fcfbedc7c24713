#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. MPI_THREAD_MULTIPLE across simulated nodes: 4 and 8
# threads per rank, each on its own communicator, Sendrecv of every size class (inline, eager, SRQ, rendezvous)
# with every other rank, wildcard receives and a collective per communicator, verified (tests/mpi/threads.c), on
# 2x2 and on three nodes with 1, 2 and 3 ranks, each shape with 4 and 8 threads and in eager and on-demand mode;
# then at 2x2 with 4 threads each also on its own window over osc/rdma (puts, gets and fetch-and-op, verified).
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 3 3
# run_threads HOSTS THREADS MODE [rma]
run_threads() {
    local hosts=$1 threads=$2 mode=$3 rma=${4:-} args="--mca btl_xrc_connect $3"
    [ -n "$rma" ] && args="$args --mca osc rdma --mca osc_rdma_btls xrc --mca btl_xrc_verbose 10"
    XRC_MPIRUN_ARGS="$args" xrc_run "$WORKDIR/out" "$hosts" self,vader,xrc "$MPI_DIR/threads" "$threads" 1 $rma ||
        die "threads ($hosts, $threads threads, $mode${rma:+, $rma}) failed: $(grep -m3 'threads:\|btl:xrc' "$WORKDIR/out" | tr '\n' ' ')"
    expect_line "$WORKDIR/out" '^threads: OK .*errors=0' "threads $hosts x $threads, $mode${rma:+, $rma}"
    # the windows' traffic went over xrc: RDMA writes, reads and atomics in every process's counters
    [ -z "$rma" ] || [ "$(paste <(counter "$WORKDIR/out" rdma_writes) <(counter "$WORKDIR/out" rdma_reads) \
        <(counter "$WORKDIR/out" atomics) | awk '$1 > 0 && $2 > 0 && $3 > 0' | grep -c .)" = \
        "$(echo "$hosts" | tr ',' '\n' | cut -d: -f2 | paste -sd+ | bc)" ] ||
        die "not every process put, got and fetched-and-added over xrc"
}
run_threads nodeA:2,nodeB:2 4 eager
run_threads nodeA:2,nodeB:2 8 on-demand
run_threads nodeA:1,nodeB:2,nodeC:3 4 on-demand
run_threads nodeA:1,nodeB:2,nodeC:3 8 eager
run_threads nodeA:2,nodeB:2 4 eager rma
expect_no_objects
info "PASS"
