#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. Outages past the retry budget with two rails and
# btl_xrc_outage_limit (simcluster up --rails 2, 2 nodes x 2 ranks, verified all-to-all traffic of three size
# classes plus 16 numbered messages per pair and round, tests/mpi/steady, retry budget 0.54 s: btl_xrc_timeout 14):
# - a switch that reboots: every port of every node down OUTAGE_TEST_DOWN s (3 by default) at once. Each rail's
#   requests time out; the first rail to be given up hands its traffic to the other, and the last one rides the
#   outage: its sends are held, what was not acknowledged goes out again over new connections when the ports are
#   back, the receivers drop what they had. The job completes, nothing lost, nothing twice, and the rail given up
#   takes its traffic back;
# - one rail down as long (nodeB's port 1), the limit on: that rail fails over at the budget as without the limit
#   (nothing waits for it while another rail carries) and comes back;
# - the control: the switch reboot without the limit ends the job, naming host, device and port.
# Nothing stays in any node's HCA afterwards.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2 --rails 2

down=${OUTAGE_TEST_DOWN:-3}
xrc="--mca pml ob1 --mca btl self,vader,xrc --mca btl_xrc_verbose 10 --mca btl_xrc_timeout 14"

# Every failback a process counted, summed over the job, on rail P.
failbacks_on() { counter_sum "$1" failbacks --port "$2"; }
# The eager RDMA rings paused by the outage or a rail's loss, and written again (a refusal costs speed, not data).
rings_again() {
    echo "rings: resumes asked $(counter_sum "$1" eager_ring_resumes_asked), agreed" \
        "$(counter_sum "$1" eager_ring_resumes_agreed), refused $(counter_sum "$1" eager_ring_resumes_refused);" \
        "spans passed over for copies $(counter_sum "$1" eager_ring_skips)"
}

STEADY_BURST=16 FLAP_NODES="nodeA nodeB" MPIRUN_TIMEOUT=$((down * 2 + 120)) \
    flapped_run "$WORKDIR/switch" nodeA:2,nodeB:2 "$xrc --mca btl_xrc_outage_limit 300" 4 "$down"
out=$WORKDIR/switch
[ $rc != noflow ] || die "no traffic in the xrc job (switch reboot, two rails)"
[ $rc = 0 ] || die "two rails did not ride through every port down $down s (exit $rc): $(grep -a -m3 'btl:xrc.*\(error\|failed\|more than\)' "$out" | tr '\n' ' ')"
expect_line "$out" '^steady: OK .*errors=0' "xrc on two rails, every node's ports down $down s at once"
expect_line "$out" '^steady: stream messages=[1-9][0-9]* out_of_sequence=0' "numbered stream, every port down"
grep -aq 'no other rail carries its traffic: its sends stay held' "$out" ||
    die "no rail rode the outage (no process held its last rail's sends past the grace)"
grep -aq 'MPI_ABORT\|giving up\|could not be sent' "$out" && die "the job was given up, or a send was not sent again"
info "switch reboot on two rails: $(grep -ac 'rail lost' "$out") rails given up, $(grep -ac 'its sends stay held' "$out")" \
    "rode the outage, $(grep -ac 'rail back' "$out") back; connections made again: $(counter_sum "$out" reconnections);" \
    "copies dropped: $(counter_sum "$out" replays_dropped), delivered: $(counter_sum "$out" replays_delivered);" \
    "failbacks on rail 1: $(failbacks_on "$out" 1), rail 2: $(failbacks_on "$out" 2); $(rings_again "$out")"

# One rail down as long, the limit on: it fails over and comes back, nothing rides.
STEADY_BURST=16 FLAP_PORT=1 MPIRUN_TIMEOUT=$((down * 2 + 120)) \
    flapped_run "$WORKDIR/one" nodeA:2,nodeB:2 "$xrc --mca btl_xrc_outage_limit 300" 4 "$down"
out=$WORKDIR/one
[ $rc != noflow ] || die "no traffic in the xrc job (one rail down)"
[ $rc = 0 ] || die "nodeB's rail 1 down $down s with the limit on: exit $rc"
expect_line "$out" '^steady: OK .*errors=0' "xrc on two rails, nodeB's rail 1 down $down s, the limit on"
expect_line "$out" '^steady: stream messages=[1-9][0-9]* out_of_sequence=0' "numbered stream, one rail down"
grep -aq 'its sends stay held' "$out" && die "a rail waited for its port although the other carried its traffic"
grep -aq 'btl:xrc: nodeB: simhca0:1: rail lost' "$out" || die "nodeB did not give rail 1 up at its grace"
[ "$(failbacks_on "$out" 1)" -gt 0 ] || die "no traffic came back to rail 1"
info "one rail down $down s, the limit on: $(grep -a -m1 'btl:xrc: nodeB: simhca0:1: rail lost' "$out" | sed 's/.*btl:xrc: //');" \
    "failbacks on rail 1: $(failbacks_on "$out" 1); $(rings_again "$out")"

# A rail down for good on one node while the other rail is down for a while on the other: nodeA's rail 1 goes down
# for 3 s, and nodeB's rail 2 dies right after. nodeB's sends over rail 1 time out (0.54 s) before its rail 2 is
# given up (its grace is 2 s here), so they go to rail 2, which then waits for its port (the last rail). When
# nodeA's rail 1 is back, nodeB's probes find it, and rail 2 hands its traffic over rather than wait for the limit.
lost_and_flapped() {
    sc exec nodeA "$SIMHCA_CTL" fault port-down --port 1 >/dev/null || die "port-down failed"
    sc exec nodeB "$SIMHCA_CTL" fault port-down --port 2 >/dev/null || die "port-down failed"
    info "nodeA's rail 1 down at $(date +%T.%N | cut -c1-12) for $down s, then nodeB's rail 2 for good"
    sleep "$down"
    sc exec nodeA "$SIMHCA_CTL" fault port-up --port 1 >/dev/null || die "port-up failed"
}
restore_rail2() { sc exec nodeB "$SIMHCA_CTL" fault port-up --port 2 >/dev/null; }
rail_lost_mid_steady lost_and_flapped restore_rail2 "nodeB's rail 2 lost, nodeA's rail 1 down $down s" \
    --mca btl_xrc_outage_limit 300 --mca btl_xrc_port_down_grace 2
out=$WORKDIR/out
grep -aq 'MPI_ABORT\|giving up\|could not be sent' "$out" && die "the job was given up, or a send was not sent again"
# Which side waited depends on which requests were in flight when the ports went down: a rail (its port down) or a
# link (its peer's port down) riding the outage; either hands its traffic over when rail 1 is back.
rails=$(grep -ac 'rail lost: its port is still down and another rail reaches its peers again' "$out")
links=$(grep -ac 'rail lost toward node [0-9]* (host node[AB]): another rail reaches node' "$out")
[ $((rails + links)) -gt 0 ] || die "nothing handed its traffic over to rail 1 when it came back"
info "rail 2 lost, rail 1 down $down s: $(grep -ac 'its sends stay held' "$out") rails rode the outage;" \
    "handed over when rail 1 came back: $rails rails, $links links"

# The control: without the limit (0; 300 s by default) the switch reboot ends the job.
FLAP_NODES="nodeA nodeB" MPIRUN_TIMEOUT=$((down * 2 + 60)) \
    flapped_run "$WORKDIR/control" nodeA:2,nodeB:2 "$xrc --mca btl_xrc_outage_limit 0" 4 "$down"
[ $rc != noflow ] || die "no traffic in the xrc job without an outage limit"
[ $rc != 0 ] && [ $rc != 124 ] || die "every rail down past the budget did not end the job without the limit (exit $rc)"
ended='btl:xrc: node[AB]: simhca0:[12]: .*\(giving up\|no other rail reaches\)'
grep -aq "$ended" "$WORKDIR/control" || die "no message naming host, device and port and why the job ended"
info "without btl_xrc_outage_limit: the job ended (exit $rc): $(grep -a -m1 "$ended" "$WORKDIR/control")"
sleep 1
expect_no_objects
info "PASS"
