#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. A sender that is alive but slow to finalize does not hold
# the others' MPI_Finalize: nodeA's rank enters MPI_Finalize 15 s after nodeB's (hold with HOLD_SLOW_FINALIZE,
# under the PMIx fence shim, so that the finalize fence is no barrier, as under Slurm 22.05's defaults). nodeB's
# rank made the TGT QP nodeA's rank sends through; it waits btl_xrc_finalize_peer_wait (2 s here) for nodeA's
# CLOSE, then tells nodeA it leaves and exits, leaving nothing in nodeB's HCA (checked while nodeA's rank still
# sleeps). nodeA's rank then closes that connection without a fence and without waiting for the departed rank.
# The job succeeds with its data verified; each rank's finalize time is reported; nothing stays in any HCA.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
[ -e "$FENCE_SHIM" ] || die "the fence shim is not built ($FENCE_SHIM)"
up_cluster 2 1
out="$WORKDIR/out"
touch "$WORKDIR/release"
HOLD_FILE="$WORKDIR/release" HOLD_SLOW_FINALIZE=15 \
    XRC_MPIRUN_ARGS="-x HOLD_FILE -x HOLD_SLOW_FINALIZE -x LD_PRELOAD=$FENCE_SHIM --mca btl_xrc_verbose 1 --mca btl_xrc_finalize_peer_wait 2" \
    xrc_run "$out" nodeA:1,nodeB:1 self,vader,xrc "$MPI_DIR/hold" &
job=$!
if wait_for_line "$out.raw" '^hold: rank 1 finalize took' 60 && ! grep -q '^hold: rank 0 finalize took' "$out.raw"; then
    # nodeB's rank has left and nodeA's is still asleep before its MPI_Finalize: nodeB's HCA must hold nothing.
    for ((i = 0; i < 50; i++)); do
        status=$(sc exec nodeB "$SIMHCA_CTL" status 2>&1 | sed -n 2p)
        hca_is_empty "$status" && break
        sleep 0.1
    done
    hca_is_empty "$status" || { wait $job; die "nodeB's rank left, but nodeB's HCA still holds: $status"; }
    info "nodeB's rank left while nodeA's was still on its way to MPI_Finalize; nodeB's HCA holds nothing: $status"
else
    info "nodeB's HCA could not be checked while nodeA's rank was still running (the machine is slow)"
fi
wait $job || die "the job with a slow sender failed (exit $?)"
expect_line "$out" '^hold: connected .*errors=0' "2x1, nodeA's rank 15 s late into MPI_Finalize"
grep -qE "btl:xrc: nodeB: simhca0:1: leaving MPI_Finalize after waiting 2 s \(btl_xrc_finalize_peer_wait\) for senders to close the TGT QPs made for them: rank 0's INI QP [0-9]+ \(TGT QP [0-9]+\)" "$out" ||
    die "nodeB's rank did not say which sender it left behind"
grep -qE 'btl:xrc: nodeA: simhca0:1: .*(error|failed)' "$out" && die "nodeA's rank reported an error closing its connection"
info "$(grep -m1 'leaving MPI_Finalize' "$out")"
info "finalize times: $(grep '^hold: rank . finalize took' "$out" | sed 's/^hold: //' | tr '\n' ';')"
expect_no_objects
info "PASS"
