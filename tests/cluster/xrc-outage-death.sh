#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. A process killed while its job rides an outage: 2 nodes x 2
# ranks of verified all-to-all traffic with the defaults (btl_xrc_outage_limit 300 s) and a short retry budget
# (0.54 s, btl_xrc_timeout 14), every node's port goes down (a switch that reboots), and once the requests in flight
# have run out of that budget (the survivors are riding the outage, their sends held or handed back), one of nodeB's
# ranks is killed with SIGKILL. Without ULFM a death ends the job: it must end soon (the runtime saw the death; the
# outage limit, which is about the fabric, must not keep the survivors waiting for it), with a non-zero status and
# the launcher's message naming the dead rank's node, no survivor crashing; once the ports are up again no node's
# HCA holds an object of the job. (Under ULFM the limit does not apply: tests/cluster/xrc-ulfm.sh.)
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2

out=$WORKDIR/out
rm -f "$WORKDIR/stop"
MPIRUN_TIMEOUT=150 XRC_MPIRUN_ARGS="--mca btl_xrc_timeout 14" \
    xrc_run "$out" nodeA:2,nodeB:2 self,vader,xrc "$MPI_DIR/steady" 1 "$WORKDIR/stop" 16 &
job=$!
wait_for_line "$out.raw" '^steady: traffic' 60 || { touch "$WORKDIR/stop"; wait $job; die "no traffic"; }

every_port port-down
info "every node's port down at $(date +%T.%N | cut -c1-12)"
sleep 2  # past the retry budget: what was in flight was given up on by the HCAs and is being ridden through
# Rank 3 (nodeB's second): the nodes share the host's process ids, so it is found by its rank and this job's stop file.
victim=$(for p in $(pgrep -x steady); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=3 &&
        tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF "$WORKDIR/stop" && echo "$p"
done | head -1)
[ -n "$victim" ] || { every_port port-up; touch "$WORKDIR/stop"; wait $job; die "rank 3 of the job not found"; }
killed=$(date +%s.%N)
kill -9 "$victim"
info "killed rank 3 (pid $victim, on nodeB) during the outage"
wait $job
rc=$?
ended=$(echo "$(date +%s.%N) - $killed" | bc)
every_port port-up
info "the job ended $ended s after the kill (exit $rc)"
[ $rc != 0 ] || die "the job with a killed process exited 0"
[ $rc != 124 ] || die "the job did not end after its process was killed (the timeout stopped it)"
grep -aqiE 'segmentation fault|signal 11|core dumped' "$out" && die "a process crashed"
grep -aqE "on node nodeB exited on signal 9|rank [0-9]+ .*on node nodeB.*(signal 9|Killed)" "$out" ||
    die "no message naming the dead rank's node"
info "$(grep -aE -m1 'on node nodeB' "$out")"
info "before the death: $(grep -ac 'its sends stay held for up to' "$out") of 4 processes riding the outage past the" \
    "grace, $(grep -ac 'went unacknowledged for the retry budget' "$out") connections whose requests ran out of the budget"
# Soon: the launcher's word, not btl_xrc_outage_limit (300 s) nor the test's timeout.
[ "$(echo "$ended < 60" | bc)" = 1 ] || die "the job took $ended s to end after the death"
sleep 1
expect_no_objects
info "PASS"
