#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. A switch that reboots while every thread of every rank has
# traffic in flight: two rails (simcluster up --rails 2), MPI_THREAD_MULTIPLE at 2x2 with 4 threads per rank, each on
# its own communicator with Sendrecv of every size class, wildcard receives and a collective, verified
# (tests/mpi/threads, going on until a stop file exists), btl_xrc_outage_limit on; every port of both nodes goes down
# for 3 s past a 0.54 s retry budget (btl_xrc_timeout 14). The first rail given up fails over, the last one rides
# the outage: what the HCA gave up on goes out again over new connections, numbered, and the receivers drop what they
# had, while the application's threads send, receive and progress at once (under ThreadSanitizer in the
# --enable-tsan build). The job must complete with every message verified, and nothing may stay in any node's HCA.
# When no request was in flight on the last rail as the ports went down (the timeouts all failed over first), the
# job rode the outage by holding alone: correct, not the path under test, and it runs again, up to three times.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2 --rails 2
# Under ThreadSanitizer the instrumented software HCA is slower: a 2.1 s budget there (timeout 16), still shorter
# than the outage.
timeout=14
tsan_on && timeout=16
# switch_reboot: the threaded job, every port of both nodes down 3 s once it carries traffic; it must complete with
# every message verified. Returns 1 when no request was in flight on the last rail as the ports went down: every
# timeout then failed over to a rail not yet known to be down, and the last one rode the outage by holding its sends
# (correct, but not the path under test; under a loaded machine's timing it happens).
switch_reboot() {
    rm -f "$WORKDIR/stop" "$WORKDIR/out" "$WORKDIR/out.raw"  # an earlier attempt's lines must not count
    (MPIRUN_TIMEOUT=150 XRC_MPIRUN_ARGS="-x THREADS_STOP_FILE=$WORKDIR/stop --mca btl_xrc_verbose 10 \
        --mca btl_xrc_timeout $timeout --mca btl_xrc_outage_limit 300 --mca btl_xrc_finalize_wait 20" \
        xrc_run "$WORKDIR/out" nodeA:2,nodeB:2 self,vader,xrc "$MPI_DIR/threads" 4 1) &
    job=$!
    wait_for_line "$WORKDIR/out.raw" '^threads: traffic' 90 || { touch "$WORKDIR/stop"; wait $job; die "no traffic"; }
    sleep 0.5
    every_port port-down
    info "every port of nodeA and nodeB down at $(date +%T.%N | cut -c1-12) for 3 s"
    sleep 3
    every_port port-up
    info "ports up at $(date +%T.%N | cut -c1-12)"
    sleep 2  # traffic over the connections made again
    touch "$WORKDIR/stop"
    wait $job
    rc=$?
    [ $rc = 0 ] || die "the threaded job did not ride through every port down 3 s (exit $rc): $(grep -a -m3 'btl:xrc.*\(error\|failed\|more than\)' "$WORKDIR/out" | tr '\n' ' ')"
    expect_line "$WORKDIR/out" '^threads: OK .*errors=0' "threads 2x2 x 4 threads on two rails, every port down 3 s"
    grep -aq 'went unacknowledged for the retry budget' "$WORKDIR/out"
}
for attempt in 1 2 3; do
    switch_reboot && break
    [ $attempt = 3 ] &&
        die "no request went unacknowledged for the retry budget in 3 attempts: the outage was not longer than it"
    info "attempt $attempt: no request was in flight on the last rail as the ports went down (ridden by holding): again"
    sleep 1
    expect_no_objects
done
grep -aq 'MPI_ABORT\|giving up\|could not be sent' "$WORKDIR/out" && die "the job was given up, or a send was not sent again"
info "$(grep -ac 'rail lost' "$WORKDIR/out") rails given up, $(grep -ac 'its sends stay held' "$WORKDIR/out") rode" \
    "the outage, $(grep -ac 'rail back' "$WORKDIR/out") back; connections made again:" \
    "$(counter_sum "$WORKDIR/out" reconnections); copies dropped: $(counter_sum "$WORKDIR/out" replays_dropped)," \
    "delivered: $(counter_sum "$WORKDIR/out" replays_delivered); eager RDMA rings written again:" \
    "$(counter_sum "$WORKDIR/out" eager_rings_resumed), refused: $(counter_sum "$WORKDIR/out" eager_ring_resumes_refused)"
sleep 1
expect_no_objects
info "PASS"
