#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. The finalize gap: a sender that is alive but late into
# MPI_Finalize sends a last burst to a rank of a node whose other rank, the one that made the sender's TGT QP, has
# left already; a packet of it needs a retransmission. 2 nodes x 2 ranks under the PMIx fence shim (finalize is
# no barrier). Every pair connects; nodeB's rank 2 (the creator of rank 0's TGT QP) enters MPI_Finalize, waits
# btl_xrc_finalize_peer_wait (2 s) for rank 0, tells it LEAVING, waits for its answer (rank 0 makes no MPI call:
# none comes) and leaves. Then nodeA's traffic to and from nodeB is dropped (simhca-ctl fault drop), rank 0 sends
# 16 small verified messages to rank 3 (inline sends) and enters MPI_Finalize at once; the drop is lifted a
# moment later. Rank 0's close must wait until the HCA has retransmitted and rank 3 acknowledged every one of them
# (every send after LEAVING is signaled) instead of destroying its INI QP: rank 3 receives all 16, data
# verified, the job exits 0, and nothing stays in any HCA. Eager RDMA rings are off so that the burst takes the
# path the gap was in: small inline sends to the receiver's SRQ, which nobody waits for. The drop is checked to
# have forced a retransmission (nodeA's ACK timeout counter). Before the fix, rank 0 destroyed its INI QP with
# the burst unacknowledged and rank 3 received nothing.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
[ -e "$FENCE_SHIM" ] || die "the fence shim is not built ($FENCE_SHIM)"
up_cluster 2 2
out="$WORKDIR/out"
go="$WORKDIR/go"
rm -f "$go"
# btl_xrc_timeout 19: a lost packet is retransmitted after 2.1 s (budget 17 s), well past the drop below.
LATE_BURST_GO="$go" \
    XRC_MPIRUN_ARGS="-x LATE_BURST_GO -x LD_PRELOAD=$FENCE_SHIM --mca btl_xrc_verbose 1 --mca btl_xrc_finalize_peer_wait 2 --mca btl_xrc_timeout 19 --mca btl_xrc_use_eager_rdma 0" \
    xrc_run "$out" nodeA:2,nodeB:2 self,vader,xrc "$MPI_DIR/late_burst" &
job=$!
stop_job() { kill "$job" 2>/dev/null; wait "$job" 2>/dev/null; }
wait_for_line "$out.raw" "btl:xrc: nodeB: .*leaving MPI_Finalize .*rank 0's INI QP" 90 ||
    { stop_job; die "nodeB's rank 2 did not leave MPI_Finalize while rank 0 was late"; }
info "$(grep -m1 "btl:xrc: nodeB: .*leaving MPI_Finalize .*rank 0's INI QP" "$out.raw")"
acks_before=$(ack_timeouts)
sc exec nodeA "$SIMHCA_CTL" fault drop nodeB >/dev/null || { stop_job; die "fault drop failed"; }
touch "$go"
if ! wait_for_line "$out.raw" '^late_burst: burst sent' 60; then
    sc exec nodeA "$SIMHCA_CTL" fault restore nodeB >/dev/null
    stop_job
    die "rank 0 did not send its burst"
fi
sleep 1  # rank 0 is in MPI_Finalize now, its burst unacknowledged
sc exec nodeA "$SIMHCA_CTL" fault restore nodeB >/dev/null || { stop_job; die "fault restore failed"; }
wait $job || die "the job with a late burst after the creator left failed (exit $?)"
acks_after=$(ack_timeouts)
nodeA_acks() { sed -n 's/.*nodeA=\([0-9]*\).*/\1/p' <<<"$1"; }
[ "$(nodeA_acks "$acks_after")" -gt "$(nodeA_acks "$acks_before")" ] ||
    die "nodeA's HCA retransmitted nothing (ACK timeouts before: $acks_before, after: $acks_after): the drop missed the burst"
info "ACK timeouts (retransmissions) per node during the burst: before $acks_before, after $acks_after"
expect_line "$out" '^late_burst: connected .*errors=0' "2x2, every pair connected"
expect_line "$out" '^late_burst: received count=16 errors=0$' "rank 3 received rank 0's late burst, data verified"
grep -qE 'btl:xrc: nodeA: simhca0:1: .*(error|failed)' "$out" && die "nodeA's rank 0 reported an error closing its connection"
expect_no_objects
info "PASS"
