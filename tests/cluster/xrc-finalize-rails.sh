#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. MPI_Finalize with two rails: once the first module
# finalizes, nothing above the BTL is called from any module. Open MPI finalizes the BTL modules after ob1 and
# the one-sided components, which it has unloaded by then; the first module's finalize progresses every module,
# and what arrives or completes on the second one then must not call ob1. 2 nodes x 1 rank, two rails (ports of
# one device), under the PMIx fence shim (finalize is no barrier). Rank 0 enters MPI_Finalize; its first module
# waits for rank 1's connection to close (btl_xrc_finalize_peer_wait 6, rank 1 closes it in its own MPI_Finalize). Meanwhile rank 1 sends it 64 small
# messages, which arrive on the rail ob1 picked (rank 0 never receives them: nothing above the BTL is left). The
# run counts when rank 0 dropped each of the 64 once (no handler) and some that came on rail 2 arrived during its
# first module's finalize (ob1 takes its rails in turn; one message before moves them; the rails deliver
# independently, so a second run is allowed): the job exits 0, rank 0 reports no error, nothing stays in any HCA. Before the fix rank 0 died of SIGSEGV in
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
    rm -rf "$go" "$WORKDIR/output"
    INFLIGHT_GO="$go" INFLIGHT_LEAD=$1 \
        XRC_MPIRUN_ARGS="-x INFLIGHT_GO -x INFLIGHT_LEAD -x LD_PRELOAD=$FENCE_SHIM --mca btl_xrc_verbose 10 --mca btl_xrc_finalize_peer_wait 6 --output-filename $WORKDIR/output" \
        xrc_run "$out" nodeA:1,nodeB:1 self,vader,xrc "$MPI_DIR/finalize_inflight" &
    job=$!
    wait_for_line "$out.raw" '^finalize_inflight: rank 0 enters MPI_Finalize' 90 ||
        { stop_job; die "rank 0 did not reach MPI_Finalize"; }
    sleep 1 # rank 0's first module waits for rank 1 in its finalize
    touch "$go"
    wait $job || die "the job whose rank 0 received messages in MPI_Finalize failed (exit $?)"
    # Each rank's output in a file of its own (mpirun's merged stream may cut a line where another rank's
    # output comes in); rank 0's lines keep their order there: the drops logged before its first module's
    # counters (the end of that module's finalize) are the messages that arrived while it ran, and each names the
    # rail it came on. The rails deliver independently: a rail-2 message may also arrive during the second
    # module's finalize.
    local rank0=$WORKDIR/rank0 rank1=$WORKDIR/rank1 drops during2 rail2
    cat "$WORKDIR"/output/1/rank.0/std* >"$rank0"
    cat "$WORKDIR"/output/1/rank.1/std* >"$rank1"
    expect_line "$rank0" '^finalize_inflight: connected .*errors=0' "2x1 on two rails, connected"
    expect_line "$rank1" '^finalize_inflight: sent count=64 errors=0' "rank 1 sent 64 messages into rank 0's MPI_Finalize"
    drops=$(grep -E '^\[nodeA:[0-9]+\] btl:xrc: (simhca0:[12]: dropped a [0-9]+-byte message for tag [0-9]+ \(no handler\)|simhca0:1 counters)' "$rank0")
    during2=$(echo "$drops" | sed '/simhca0:1 counters/,$d' | grep -c 'simhca0:2: dropped')
    rail2=$(counter_sum "$rank1" srq_sends --port 2 --host nodeB)
    info "rank 1 made $rail2 sends over rail 2 (the 64 and control messages); rank 0 dropped $(echo "$drops" | grep -c 'no handler') in all," \
        "$during2 from rail 2 during its first module's finalize (after $1 message(s) first)"
    [ "$(echo "$drops" | grep -c 'no handler')" = 64 ] || die "rank 0 did not drop each of the 64 messages once"
    [ "$during2" -ge 1 ]
}
one_run 0 || one_run 1 || die "no rail-2 message arrived during rank 0's first module's finalize, in two runs"
grep -qE 'btl:xrc: nodeA: simhca0:[12]: .*(error|failed)' "$WORKDIR/rank0" && die "rank 0 reported an error in MPI_Finalize"
expect_no_objects
info "PASS"
