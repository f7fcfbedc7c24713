#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. Not part of `make check` (make stress runs it): a long
# osc/rdma run over xrc at 3 nodes x 2. rma_stream for $OSC_SOAK_SECONDS (default 60) seconds (put, get,
# fetch-and-add, compare-and-swap from every rank to every other, values checked), then rma_datatypes and, where
# the osc/rdma allows it (see xrc-osc.sh), rma_dynamic $OSC_SOAK_REPS (default 5) times each.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
osc_rdma_setup
seconds=${OSC_SOAK_SECONDS:-60}
reps=${OSC_SOAK_REPS:-5}
up_cluster 3 2
hosts=nodeA:2,nodeB:2,nodeC:2
args="--mca osc rdma --mca osc_rdma_btls xrc --mca btl_xrc_verbose 10"
MPIRUN_TIMEOUT=$((seconds + 120)) RMA_STREAM_SECONDS=$seconds XRC_MPIRUN_ARGS="$args -x RMA_STREAM_SECONDS" \
    xrc_run "$WORKDIR/stream" "$hosts" self,vader,xrc "$MPI_DIR/rma_stream" >/dev/null || die "rma_stream failed"
expect_line "$WORKDIR/stream" '^rma_stream: OK .*ranks=6 errors=0' "rma_stream for ${seconds}s"
expect_xrc_one_sided "$WORKDIR/stream" 6 rma_stream
programs=(rma_datatypes)
[ -z "$OSC_DYNAMIC_BLOCKER" ] && programs+=(rma_dynamic)
[ -n "$OSC_DYNAMIC_BLOCKER" ] && info "rma_dynamic: not run: $OSC_DYNAMIC_BLOCKER"
for r in $(seq "$reps"); do
    for prog in "${programs[@]}"; do
        XRC_MPIRUN_ARGS="$args" xrc_run "$WORKDIR/out" "$hosts" self,vader,xrc "$MPI_DIR/$prog" >/dev/null ||
            { cat "$WORKDIR/out"; die "$prog failed in round $r"; }
        grep -qE "^$prog: OK ranks=6 errors=0" "$WORKDIR/out" || { cat "$WORKDIR/out"; die "$prog: no OK line in round $r"; }
        expect_xrc_one_sided "$WORKDIR/out" 6 "$prog round $r"
    done
done
info "${programs[*]}: $reps rounds OK"
expect_no_objects
info "PASS"
