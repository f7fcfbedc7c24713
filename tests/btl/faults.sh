#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Failures are reported, never a hang or a silent drop: the port goes down under a live job, and the job ends
# with a non-zero exit and a message naming the device and port (btl_xrc_outage_limit 0: no outage is ridden past the
# retry budget; tests/cluster/xrc-outage.sh rides them).
. "$(dirname "$0")/common.sh"
start_daemon
rm -f "$work/release"
HOLD_FILE="$work/release" XRUN_TIMEOUT=90 xrun "$work/out" -x HOLD_FILE -np 2 --mca btl self,xrc \
    --mca btl_xrc_timeout 10 --mca btl_xrc_retry_count 2 --mca btl_xrc_outage_limit 0 "$MPI/hold" &
job=$!
for _ in $(seq 300); do grep -q '^hold: connected' "$work/out" 2>/dev/null && break; sleep 0.1; done
"$SIMHCA_CTL" fault port-down >/dev/null
touch "$work/release"  # the ranks now need the network for their barrier
await_xrun $job
status=$?
if [ $status -ne 0 ] && [ $status -ne 124 ] && [ $status -ne 137 ] && grep -q 'btl:xrc: .*simhca0:1: ' "$work/out"; then
    pass "port down: job stopped (exit $status): $(grep -m1 'btl:xrc: .*simhca0:1: ' "$work/out")"
else
    fail "port down: exit $status"
    grep -v '^\[.*\] \[ *[0-9]*\]' "$work/out" | head -30 | sed 's/^/    /'
fi
"$SIMHCA_CTL" fault port-up >/dev/null
expect_no_objects "after the failed job"
finish
