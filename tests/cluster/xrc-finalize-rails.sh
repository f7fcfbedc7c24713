#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. MPI_Finalize with two rails: once the first module
# finalizes, nothing above the BTL is called from any module. Open MPI finalizes the BTL modules after ob1 and
# the one-sided components, which it has unloaded by then; the first module's finalize progresses every module,
# and what arrives or completes on the second one then must not call ob1. 2 nodes x 1 rank, two rails (ports of
# one device), under the PMIx fence shim (finalize is no barrier). Rank 0 enters MPI_Finalize; its first module
# waits for rank 1's connection to close (btl_xrc_finalize_peer_wait 6, rank 1 closes it in its own MPI_Finalize). Meanwhile rank 1 sends it 64 small
# messages, which arrive on the rail ob1 picked (rank 0 never receives them: nothing above the BTL is left). The
# run counts when all 64 arrived during rank 0's first module's finalize (dropped there, no handler) and rail 2
# carried some (ob1 takes its rails in turn; one message before moves them): the job exits 0, rank 0 reports no
# error, nothing stays in any HCA. Before the fix rank 0 died of SIGSEGV in
# MPI_Finalize, calling ob1's receive callback in its unloaded library.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
[ -e "$FENCE_SHIM" ] || die "the fence shim is not built ($FENCE_SHIM)"
up_cluster 2 1 --rails 2
out="$WORKDIR/out"
go="$WORKDIR/go"
stop_job() { kill "$job" 2>/dev/null; wait "$job" 2>/dev/null; }

# one_run LEAD: the job, LEAD small messages from rank 1 to rank 0 first; true when rail 2 carried the messages
# that arrived during rank 0's MPI_Finalize
one_run() {
    rm -f "$go"
    INFLIGHT_GO="$go" INFLIGHT_LEAD=$1 \
        XRC_MPIRUN_ARGS="-x INFLIGHT_GO -x INFLIGHT_LEAD -x LD_PRELOAD=$FENCE_SHIM --mca btl_xrc_verbose 10 --mca btl_xrc_finalize_peer_wait 6" \
        xrc_run "$out" nodeA:1,nodeB:1 self,vader,xrc "$MPI_DIR/finalize_inflight" &
    job=$!
    wait_for_line "$out.raw" '^finalize_inflight: rank 0 enters MPI_Finalize' 90 ||
        { stop_job; die "rank 0 did not reach MPI_Finalize"; }
    sleep 1 # rank 0's first module waits for rank 1 in its finalize
    touch "$go"
    wait $job || die "the job whose rank 0 received messages in MPI_Finalize failed (exit $?)"
    expect_line "$out" '^finalize_inflight: connected .*errors=0' "2x1 on two rails, connected"
    expect_line "$out" '^finalize_inflight: sent count=64 errors=0' "rank 1 sent 64 messages into rank 0's MPI_Finalize"
    # rank 0's own lines keep their order: the drops logged before its first module's counters (the end of that
    # module's finalize) are the messages that arrived while it ran, on either rail.
    local during rail2
    during=$(grep -E '^\[nodeA:[0-9]+\] btl:xrc: (dropped a [0-9]+-byte message for tag [0-9]+ \(no handler\)|simhca0:1 counters)' "$out" |
        sed '/simhca0:1 counters/,$d' | grep -c 'no handler')
    rail2=$(( $(counter_sum "$out" srq_sends --port 2 --host nodeB) - 1 ))
    info "rank 1 sent $rail2 of the 64 over rail 2; rank 0 dropped $during during its first module's finalize" \
        "(after $1 message(s) first)"
    [ "$during" = 64 ] || die "only $during of the 64 messages arrived during rank 0's first module's finalize"
    [ "$rail2" -ge 1 ]
}
one_run 0 || one_run 1 || die "rank 1's messages took rail 1 both times: the module finalized second got none"
grep -qE 'btl:xrc: nodeA: simhca0:[12]: .*(error|failed)' "$out" && die "rank 0 reported an error in MPI_Finalize"
expect_no_objects
info "PASS"
