#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. A rail given up comes back and is used again: two rails
# (simcluster up --rails 2), verified all-to-all traffic at 2x2 with 16 numbered messages per pair and round
# (tests/mpi/steady), nodeB's rail 1 down past a 1 s btl_xrc_port_down_grace (nodeB gives the rail up, nodeA's sends
# toward it fail after the 0.54 s retry budget and fail over), then back up 2.5 s after it went down. nodeB's ranks
# take the rail back (a message naming host, device and port); nodeA's ranks take their links back when nodeB's
# connection requests arrive; each process counts its peers' traffic back on rail 1 (failbacks) and made new
# connections over it; the job completes with every message verified and every numbered message once and in order.
# Then the rail that came back carries the job when the other rail is lost for good. Last, a path lost and found
# with every port up (no port event) comes back through the connection managers' probes. Nothing stays in any
# node's HCA afterwards.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2 --rails 2

rail_lost_and_back() {
    sc exec nodeB "$SIMHCA_CTL" fault port-down --port 1 >/dev/null || die "port-down failed"
    info "nodeB's rail 1 down at $(date +%T.%N | cut -c1-12)"
    sleep 2.5
    sc exec nodeB "$SIMHCA_CTL" fault port-up --port 1 >/dev/null || die "port-up failed"
    info "nodeB's rail 1 up at $(date +%T.%N | cut -c1-12)"
}
nothing() { :; }
rail_lost_mid_steady rail_lost_and_back nothing "nodeB's rail 1 lost, then back" --mca btl_xrc_port_down_grace 1
out=$WORKDIR/out
grep -q 'btl:xrc: nodeB: simhca0:1: rail lost' "$out" || die "nodeB did not give rail 1 up"
grep -q 'btl:xrc: nodeB: simhca0:1: rail back' "$out" || die "nodeB did not take rail 1 back"
info "$(grep -m1 'btl:xrc: nodeB: simhca0:1: rail back' "$out")"
grep -q 'btl:xrc: .*MPI_ABORT\|btl:xrc: .*giving up' "$out" && die "the job was given up"
back=$(grep -E 'btl:xrc: simhca0:1 counters:' "$out" | grep -c ' failbacks=[1-9]')
[ "$back" = 4 ] || die "$back of 4 processes counted their peers' traffic back on rail 1"
attempts=$(grep -E 'btl:xrc: simhca0:1 counters:' "$out" | grep -oE ' connection_attempts=[0-9]+' | cut -d= -f2 |
    tr '\n' ' ')
info "rail 1 at finalize: $(grep -E 'btl:xrc: simhca0:1 counters:' "$out" |
    grep -oE ' (failovers|failbacks|connection_attempts)=[0-9]+' | tr -d '\n')"
[ "$(echo "$attempts" | tr ' ' '\n' | awk '$1 >= 2' | grep -c .)" -ge 2 ] ||
    die "fewer than 2 processes connected again over rail 1 (connection attempts: $attempts)"
sleep 1
expect_no_objects

# The rail that came back carries the job when the other one is lost: nodeB's rail 1 down past the grace and back
# (its peers' traffic returns to it), then nodeB's rail 2 down for good: everything goes over rail 1, verified. On-node
# traffic goes over xrc too (no vader): the on-node peers come back to rail 1 over a new HCA loopback pair.
rail_1_back_then_rail_2_lost() {
    rail_lost_and_back
    sleep 2
    sc exec nodeB "$SIMHCA_CTL" fault port-down --port 2 >/dev/null || die "port-down of rail 2 failed"
    info "nodeB's rail 2 down for good at $(date +%T.%N | cut -c1-12)"
}
rail_2_up() { sc exec nodeB "$SIMHCA_CTL" fault port-up --port 2 >/dev/null || die "port-up of rail 2 failed"; }
RAIL_TEST_BTLS=self,xrc rail_lost_mid_steady rail_1_back_then_rail_2_lost rail_2_up "nodeB's rail 1 lost and back, then rail 2 lost" \
    --mca btl_xrc_port_down_grace 1
grep -q 'btl:xrc: nodeB: simhca0:1: rail back' "$out" || die "nodeB did not take rail 1 back"
grep -q 'btl:xrc: nodeB: simhca0:2: rail lost' "$out" || die "nodeB did not give rail 2 up"
grep -q 'btl:xrc: .*MPI_ABORT\|btl:xrc: .*giving up' "$out" && die "the job was given up"
info "after rail 2's loss: $(grep -E 'btl:xrc: simhca0:2 counters:' "$out" | grep -oE ' failovers=[0-9]+' | tr -d '\n') on rail 2"
sleep 1
expect_no_objects

# A path lost and found with every port up: nodeB's rail 1 loses every acknowledgement for 2.5 s (fault ack-drop),
# past the retry budget, and no port goes down. Both ends' connections over it break and their peers' traffic goes
# over rail 2; no port event will say when the path is back, so each end asks the other's (PROBE) until it answers
# (an answer that crosses while the acknowledgements are still lost makes a connection that breaks again, and the
# asking goes on), and the traffic returns to rail 1 on every process.
path_lost_and_back() {
    sc exec nodeB "$SIMHCA_CTL" fault ack-drop --port 1 >/dev/null || die "ack-drop failed"
    info "nodeB's rail 1 loses every acknowledgement from $(date +%T.%N | cut -c1-12), its port up"
    sleep 2.5
    sc exec nodeB "$SIMHCA_CTL" fault ack-restore --port 1 >/dev/null || die "ack-restore failed"
    info "nodeB's rail 1 acknowledgements back at $(date +%T.%N | cut -c1-12)"
}
rail_lost_mid_steady path_lost_and_back nothing "nodeB's rail 1 path lost 2.5 s with its port up" \
    --mca btl_xrc_retry_count 7
grep -q 'btl:xrc: .*MPI_ABORT\|btl:xrc: .*giving up' "$out" && die "the job was given up"
grep -q 'btl:xrc: nodeB: simhca0:1: rail lost:' "$out" && die "a rail was given up (no port went down)"
failed=$(counter_nonzero "$out" failovers --port 1)
[ "$failed" = 4 ] || die "$failed of 4 processes failed peers over from rail 1 (the path loss was not seen)"
back=$(counter_nonzero "$out" failbacks --port 1)
[ "$back" = 4 ] || die "$back of 4 processes took their peers' traffic back on rail 1 after the path came back"
grep -q 'usable again: it answered a PROBE' "$out" || die "no connection came back through a PROBE's answer"
info "rail 1 at finalize: $(grep -E 'btl:xrc: simhca0:1 counters:' "$out" |
    grep -oE ' (failovers|failbacks|replays_dropped)=[0-9]+' | tr -d '\n')"
sleep 1
expect_no_objects
info "PASS"
