#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. A request that a TGT QP's responder must refuse puts
# that shared TGT QP in the error state (the sender's path to every rank of the node): a SEND naming an SRQ the TGT
# QP does not serve (misrouted), then an RDMA operation with an rkey nobody has (forged), each injected into the
# sending HCA (simhca-ctl fault misroute / bad-rkey on one INI QP of a job on nodeA). The job ends, with a non-zero
# status and not the timeout, and a message naming the sender: its host, device, port, INI QP, rank and node
# (from the receiving side, QP_REQ_ERR / QP_ACCESS_ERR on the TGT QP; from the sending side, the refused request).
# Last, the misrouted request once more, when it is the only one in flight and a kept copy of an inline send (below).
# Another job on the same two nodes at the same time carries on and completes with every byte verified. Nothing
# stays in any node's HCA afterwards.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2

# xrc_ini_qps NODE: the QPNs of the XRC INI QPs of NODE's HCA (as `simhca-ctl list` prints them, 0x...)
xrc_ini_qps() { sc exec "$1" "$SIMHCA_CTL" list | awk '$2 == "XRC_INI" { print $1 }'; }
# tgt_senders NODE: the INI QPNs that NODE's TGT QPs are connected to (0x...)
tgt_senders() { sc exec "$1" "$SIMHCA_CTL" list | awk '$2 == "XRC_TGT" { print $8 }'; }

# The bystander: steady traffic on nodeA:1,nodeB:1 through both faults; its INI QPs on nodeA.
by_out="$WORKDIR/bystander"
rm -f "$WORKDIR/stop.bystander"
MPIRUN_TIMEOUT=180 xrc_run "$by_out" nodeA:1,nodeB:1 self,vader,xrc "$MPI_DIR/steady" 1 "$WORKDIR/stop.bystander" &
bystander=$!
wait_for_line "$by_out.raw" '^steady: traffic' 60 || { wait $bystander; die "the bystander carried no traffic"; }
bystander_qps=$(xrc_ini_qps nodeA)
stop_all() { touch "$WORKDIR/stop.bystander" "$WORKDIR/stop.victim"; wait; }

# forged_run NAME FAULT EVENT SENDER-STATUS: a second job like the bystander starts, and once it carries traffic,
# `simhca-ctl fault FAULT --qp Q` on nodeA, Q being its INI QP toward nodeB. It must end with an error naming the
# sender (EVENT: the receiving side's event, SENDER-STATUS: the sending side's completion status, in
# ibv_event_type_str's and ibv_wc_status_str's words), in bounded time (not the timeout).
forged_run() {
    local name=$1 fault=$2 event=$3 status=$4 victim_out="$WORKDIR/victim.$1" victim qpn="" q start rc elapsed
    # VICTIM_PROGRAM=hold: hold's small exchange, released (the stop file) once the fault is in; steady otherwise
    local program=("$MPI_DIR/steady" 1 "$WORKDIR/stop.victim") ready='^steady: traffic' args=""
    [ "${VICTIM_PROGRAM:-steady}" = hold ] && program=("$MPI_DIR/hold") ready='^hold: connected' \
        args="-x HOLD_FILE=$WORKDIR/stop.victim -x HOLD_SMALL_EXCHANGE=1"
    rm -f "$WORKDIR/stop.victim"
    MPIRUN_TIMEOUT=60 XRC_MPIRUN_ARGS="$args" xrc_run "$victim_out" nodeA:1,nodeB:1 self,vader,xrc "${program[@]}" &
    victim=$!
    wait_for_line "$victim_out.raw" "$ready" 60 || { stop_all; die "$name: the second job did not start ($ready)"; }
    # Its INI QP toward nodeB: not the bystander's, and connected to one of nodeB's TGT QPs.
    for q in $(xrc_ini_qps nodeA); do
        grep -qx "$q" <<<"$bystander_qps" && continue
        tgt_senders nodeB | grep -qx "$q" && qpn=$q
    done
    [ -n "$qpn" ] || { stop_all; die "$name: no INI QP of the second job toward nodeB on nodeA"; }
    start=$(date +%s.%N)
    # shellcheck disable=SC2086  # FAULT is the fault's words
    sc exec nodeA "$SIMHCA_CTL" fault $fault --qp "$qpn" >/dev/null || { stop_all; die "$name: fault $fault failed"; }
    [ "${VICTIM_PROGRAM:-steady}" = hold ] && touch "$WORKDIR/stop.victim"  # rank 0 sends its 8 bytes now
    wait $victim
    rc=$?
    elapsed=$(echo "$(date +%s.%N) - $start" | bc)
    touch "$WORKDIR/stop.victim"
    [ $rc -ne 0 ] && [ $rc -ne 124 ] ||
        { stop_all; die "$name: the job with the refused request did not end with an error (exit $rc)"; }
    grep -qiE 'segmentation fault|signal 11|core dumped' "$victim_out" && { stop_all; die "$name: a process crashed"; }
    # Whichever side reports first ends the job: either message names the sender (nodeA's rank 0 and its INI QP).
    local dec=$((qpn))
    local receiver="btl:xrc: nodeB: simhca0:1: $event on TGT QP [0-9]+ made for sender rank 0 on node [0-9]+ \\(its INI QP $dec, .*\\(peer rank 0 on nodeA\\)"
    local sender="btl:xrc: nodeA: simhca0:1: .* failed: $status .*the responder refused it: this rank \\(0\\) sent it on its INI QP $dec toward node [0-9]+ .*\\(peer rank 1 on nodeB\\)"
    grep -qE "$receiver|$sender" "$victim_out" ||
        { stop_all; die "$name: no message naming the sender (INI QP $qpn of nodeA's rank 0)"; }
    info "$name (fault $fault --qp $qpn on nodeA): exit $rc, $elapsed s after the fault"
    grep -E "$receiver" "$victim_out" | head -1 | sed 's/^/  receiving side: /'
    grep -E "$sender" "$victim_out" | head -1 | sed 's/^/  sending side: /'
}

forged_run misrouted misroute 'invalid request local work queue error' 'remote invalid request error'
forged_run forged-rkey bad-rkey 'local access violation work queue error' 'remote access error'
# The same refusal while the only request in flight is a kept copy of an inline send (one rail riding outages, the
# default): rank 0 sends 8 bytes to nodeB's rank and waits for 8 back (hold's small exchange); ob1 heard at the post
# that the message was sent, and nodeB's side leaves the end to the sender, so only the sender's report keeps the
# two ranks from waiting for each other until the timeout.
VICTIM_PROGRAM=hold forged_run copy-only misroute 'invalid request local work queue error' 'remote invalid request error'
touch "$WORKDIR/stop.bystander"
wait $bystander || die "the other job on the same nodes failed (exit $?)"
expect_line "$by_out" '^steady: OK .*errors=0' "the other job on the same nodes, through both faults"
sleep 1
expect_no_objects
info "PASS"
