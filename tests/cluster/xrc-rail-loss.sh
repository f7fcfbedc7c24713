#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. One rail lost for good mid-job is survived: two rails
# (simcluster up --rails 2), verified all-to-all traffic at 2x2 (tests/mpi/steady: 64 B, 8 KiB and 256 KiB
# messages), nodeB's rail 1 goes down and stays down past a 1 s btl_xrc_port_down_grace. nodeB's ranks give the
# rail up with a message naming host, device and port and the rail traffic continues on; nodeA's ranks, whose sends
# toward nodeB's dead port fail after their retry budget (btl_xrc_timeout 14: about 0.5 s), fail over toward nodeB
# too. What was queued or in flight on the lost rail is sent again over rail 2, new sends are forwarded to it: the
# job completes with every message verified, and the counters at finalize show the peers failed over and the sends
# that went over the other rail. Exactly once: besides the main stream, every pair exchanges 16 small messages a
# round, each numbered (steady's BURST), so the rail dies with many in flight; the receivers see every number once
# and in order. The copies sent again are counted by the receivers: dropped when the lost rail had delivered them
# (replays_dropped: only a message delivered whose acknowledgement died with the port, not in every run), handed
# up otherwise (replays_delivered). Nothing stays in any node's HCA afterwards.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2 --rails 2

rail_down() {
    sc exec nodeB "$SIMHCA_CTL" fault port-down --port 1 >/dev/null || die "port-down failed"
    info "nodeB's rail 1 down for good at $(date +%T.%N | cut -c1-12)"
}
rail_up() { sc exec nodeB "$SIMHCA_CTL" fault port-up --port 1 >/dev/null || die "port-up failed"; }
rail_lost_mid_steady rail_down rail_up "nodeB's rail 1 lost for good mid-job" --mca btl_xrc_port_down_grace 1
grep -q 'btl:xrc: nodeB: simhca0:1: rail lost: the port has been down for more than 1 s (btl_xrc_port_down_grace); traffic continues on simhca0:2' "$WORKDIR/out" ||
    die "no message naming nodeB's lost rail and the rail traffic continues on"
grep -q 'btl:xrc: .*MPI_ABORT\|btl:xrc: .*giving up' "$WORKDIR/out" && die "the job was given up"
info "$(grep -m1 'btl:xrc: nodeB: simhca0:1: rail lost' "$WORKDIR/out")"
grep 'btl:xrc: nodeA: simhca0:1: rail lost toward node' "$WORKDIR/out" | head -2 | while read -r line; do info "$line"; done
# counters: every process failed its rail-1 peers over; sends went over rail 2 instead
failed=$(grep -E 'btl:xrc: simhca0:1 counters:' "$WORKDIR/out" | grep -c ' failovers=[1-9]')
[ "$failed" = 4 ] || die "$failed of 4 processes counted peers failed over on rail 1"
moved=$(grep -E 'btl:xrc: simhca0:1 counters:' "$WORKDIR/out" | grep -oE 'failover_sends=[0-9]+' | cut -d= -f2 |
    awk '{ s += $1 } END { print s + 0 }')
[ "$moved" -gt 0 ] || die "no send went over rail 2 for rail 1"
info "every process failed its rail-1 peers over; $moved sends went over rail 2 instead:" \
    "$(grep -E 'btl:xrc: simhca0:1 counters:' "$WORKDIR/out" | grep -oE ' failovers=[0-9]+ failover_sends=[0-9]+' | tr '\n' ';')"
sum_counter() {
    grep -E 'btl:xrc: simhca0:[12] counters:' "$WORKDIR/out" | grep -oE " $1=[0-9]+" | cut -d= -f2 |
        awk '{ s += $1 } END { print s + 0 }'
}
info "copies sent again: $(sum_counter replays_delivered) handed up, $(sum_counter replays_dropped) dropped" \
    "(the lost rail had delivered them)"
sleep 1
expect_no_objects
info "PASS"
