#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. A peer node that vanishes (all its traffic dropped) is
# reported through the error path with the device and port, and the job ends with a non-zero status: no hang,
# no silent drop. Nothing stays in any node's HCA afterwards.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2
rm -f "$WORKDIR/release"
MPIRUN_TIMEOUT=120 HOLD_FILE="$WORKDIR/release" \
    XRC_MPIRUN_ARGS="-x HOLD_FILE --mca btl_xrc_timeout 12 --mca btl_xrc_retry_count 3" \
    xrc_run "$WORKDIR/out" nodeA:1,nodeB:1 self,vader,xrc "$MPI_DIR/hold" &
job=$!
for _ in $(seq 600); do grep -q '^hold: connected' "$WORKDIR/out.raw" 2>/dev/null && break; sleep 0.1; done
sc exec nodeA "$SIMHCA_CTL" fault drop nodeB >/dev/null || fail "fault injection failed"
touch "$WORKDIR/release"
wait $job
rc=$?
sc exec nodeA "$SIMHCA_CTL" fault restore nodeB >/dev/null
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "the job did not fail cleanly (exit $rc)"
grep -q 'btl:xrc: .*simhca0:1: .*transport retry counter exceeded' "$WORKDIR/out" ||
    fail "no error naming the device, port and reason"
info "peer lost: $(grep -m1 'btl:xrc: .*simhca0:1: ' "$WORKDIR/out") (exit $rc)"
expect_no_objects
info "PASS"
