#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# MPI_THREAD_MULTIPLE with every thread in the BTL's progress at once (tests/mpi/pollers: verified ring exchanges
# waited for with MPI_Iprobe and MPI_Testall loops; a blocking wait lets only one thread progress at a time) over
# btl xrc on one node (peers through the HCA's loopback queue), while the port goes down and comes back three times
# within btl_xrc_port_down_grace: the port events are acted on by whichever thread progresses, the loopback queue
# is held and reopened under the senders, and the job must finish with every message verified. 2 ranks x 4 threads.
. "$(dirname "$0")/common.sh"
start_daemon
rm -f "$work/stop" "$work/out"
# The port flaps once the traffic runs, then the job is told to stop (whatever happened: the job must end).
flap() {
    local i k
    for ((i = 0; i < 600; i++)); do grep -q '^pollers: traffic' "$work/out" 2>/dev/null && break; sleep 0.1; done
    for k in 1 2 3; do
        sleep 0.3
        "$SIMHCA_CTL" fault port-down --port 1 >/dev/null
        sleep 0.5
        "$SIMHCA_CTL" fault port-up --port 1 >/dev/null
    done
    sleep 0.5
    touch "$work/stop"
}
flap &
flapper=$!
run_check "pollers 2 ranks x 4 threads self,xrc, the port flapping" '^pollers: OK .*errors=0' \
    -np 2 --mca btl self,xrc --mca btl_xrc_port_down_grace 10 "$MPI/pollers" 4 "$work/stop"
wait $flapper
downs=$(grep -c 'the port went down' "$work/out")
[ "$downs" -ge 2 ] && pass "the port went down under the job ($downs notices)" ||
    fail "the job saw no port going down ($downs notices)"
finish
