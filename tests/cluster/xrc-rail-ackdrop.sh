#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. One rail lost for good while its link already lost the
# acknowledgements: exactly once through the receivers' duplicate drop. Two rails (simcluster up --rails 2),
# btl_xrc_rail_failover on, verified all-to-all traffic at 2x2 (tests/mpi/steady) with a numbered stream (steady's
# BURST: 16 small messages per pair a round). nodeB's rail 1 first loses every answer crossing it (simhca-ctl fault
# ack-drop): what either node sends over it still lands at the receiver (delivered, ring written), but no sender
# hears of it and the senders' HCAs retransmit into the void. A quarter second later, inside the retry budget
# (btl_xrc_timeout 14 with 7 retries: about 0.5 s), the port goes down for good; the sends fail with the rail and
# are sent again over rail 2, among them the ones rail 1 had delivered. The receivers must drop those copies (their
# count of what rail 1 delivered from that source is above the copy's number: replays_dropped > 0) and hand up the
# rest: the job completes with every message verified and every numbered message seen once and in order.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2 --rails 2

acks_lost_then_rail_down() {
    sc exec nodeB "$SIMHCA_CTL" fault ack-drop --port 1 >/dev/null || die "ack-drop failed"
    info "nodeB's rail 1 loses every acknowledgement from $(date +%T.%N | cut -c1-12)"
    sleep 0.25
    sc exec nodeB "$SIMHCA_CTL" fault port-down --port 1 >/dev/null || die "port-down failed"
    info "nodeB's rail 1 down for good at $(date +%T.%N | cut -c1-12)"
}
rail_up() { sc exec nodeB "$SIMHCA_CTL" fault port-up --port 1 >/dev/null || die "port-up failed"; }
rail_lost_mid_steady acks_lost_then_rail_down rail_up "nodeB's rail 1 lost for good after losing its ACKs" \
    --mca btl_xrc_port_down_grace 1 --mca btl_xrc_retry_count 7
grep -q 'btl:xrc: .*MPI_ABORT\|btl:xrc: .*giving up' "$WORKDIR/out" && die "the job was given up"
grep -q 'btl:xrc: nodeB: simhca0:1: rail lost' "$WORKDIR/out" || die "nodeB's ranks did not give rail 1 up"
failed=$(counter_nonzero "$WORKDIR/out" failovers --port 1)
[ "$failed" = 4 ] || die "$failed of 4 processes counted peers failed over on rail 1"
moved=$(counter_sum "$WORKDIR/out" failover_sends --port 1)
dropped=$(counter_sum "$WORKDIR/out" replays_dropped --port 1)
delivered=$(counter_sum "$WORKDIR/out" replays_delivered --port 1)
# nodeA's receivers drop copies of what nodeB sent (their ACKs lost on the way into nodeB's port), nodeB's those of
# what nodeA sent (the ACKs nodeB's port never let out): both sides of the fault.
dropped_a=$(counter_sum "$WORKDIR/out" replays_dropped --port 1 --host nodeA)
dropped_b=$(counter_sum "$WORKDIR/out" replays_dropped --port 1 --host nodeB)
info "$moved sends went over rail 2 for rail 1; copies sent again: replays_dropped=$dropped (rail 1 had delivered" \
    "them; nodeA's receivers $dropped_a, nodeB's $dropped_b) replays_delivered=$delivered"
[ "$dropped" -gt 0 ] || die "no copy was dropped: the receivers never met one that rail 1 had delivered"
sleep 1
expect_no_objects
info "PASS"
