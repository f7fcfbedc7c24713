#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. One rail lost for good while every thread of every rank has
# traffic in flight: two rails (simcluster up --rails 2), MPI_THREAD_MULTIPLE at 2x2 with 4 threads per rank, each
# on its own communicator with Sendrecv of every size class, wildcard receives and a collective, verified
# (tests/mpi/threads, going on until a stop file exists), rail failover on; nodeB's rail 1 goes down and stays down
# past a 1 s btl_xrc_port_down_grace, as in xrc-rail-loss.sh. The job must complete with every message verified,
# every process must have failed its rail-1 peers over, and nothing may stay in any node's HCA. Threads on both
# sides of the loss: what progress, the sends, the failover and the rail's drain do at once (under
# ThreadSanitizer in the --enable-tsan build).
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2 --rails 2
rm -f "$WORKDIR/stop"
# A 0.54 s retry budget (timeout 14) finds the loss fast; under ThreadSanitizer, beside the check's other legs, the
# instrumented software HCA once acknowledged nothing within it on both rails before any fault (the job ended at
# start-up, "no other rail reaches this peer"): there the budget is 2.1 s (timeout 16), still inside the 3 s the
# loss is given before the job stops.
timeout=14
tsan_on && timeout=16
(MPIRUN_TIMEOUT=120 XRC_MPIRUN_ARGS="-x THREADS_STOP_FILE=$WORKDIR/stop --mca btl_xrc_verbose 10 \
    --mca btl_xrc_rail_failover 1 --mca btl_xrc_timeout $timeout --mca btl_xrc_finalize_wait 20 \
    --mca btl_xrc_port_down_grace 1" xrc_run "$WORKDIR/out" nodeA:2,nodeB:2 self,vader,xrc "$MPI_DIR/threads" 4 1) &
job=$!
wait_for_line "$WORKDIR/out.raw" '^threads: traffic' 90 || { touch "$WORKDIR/stop"; wait $job; die "no traffic"; }
sleep 0.5
sc exec nodeB "$SIMHCA_CTL" fault port-down --port 1 >/dev/null || { touch "$WORKDIR/stop"; wait $job; die "port-down failed"; }
info "nodeB's rail 1 down for good at $(date +%T.%N | cut -c1-12)"
sleep 3
touch "$WORKDIR/stop"
wait $job
rc=$?
sc exec nodeB "$SIMHCA_CTL" fault port-up --port 1 >/dev/null
[ $rc = 0 ] || die "the threaded job did not survive the rail's loss (exit $rc)"
expect_line "$WORKDIR/out" '^threads: OK .*errors=0' "threads 2x2 x 4 threads, nodeB's rail 1 lost mid-job"
grep -q 'btl:xrc: nodeB: simhca0:1: rail lost' "$WORKDIR/out" || die "no message naming nodeB's lost rail"
failed=$(grep -E 'btl:xrc: simhca0:1 counters:' "$WORKDIR/out" | grep -c ' failovers=[1-9]')
[ "$failed" = 4 ] || die "$failed of 4 processes counted peers failed over on rail 1"
info "every process failed its rail-1 peers over:" \
    "$(grep -E 'btl:xrc: simhca0:1 counters:' "$WORKDIR/out" | grep -oE ' failovers=[0-9]+ failover_sends=[0-9]+' | tr '\n' ';')"
sleep 1
expect_no_objects
info "PASS"
