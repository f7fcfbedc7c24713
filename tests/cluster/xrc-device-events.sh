#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. Device events that mean lost data end the job, each with
# a message naming host, device, port and what failed, and never a hang or a crash: SRQ_ERR on one of nodeB's
# receive queues, CQ_ERR on one of its completion queues, DEVICE_FATAL on its device, each injected while a job
# holds connections (simhca-ctl fault event). Nothing stays in any node's HCA afterwards.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 1

srq_of_nodeB() { sc exec nodeB "$SIMHCA_CTL" list | awk '$1 ~ /^0x/ && $2 == "XRC" { print "--srq", $1; exit }'; }
cq_of_nodeB() {
    sc exec nodeB "$SIMHCA_CTL" list --json | grep -o '"cq_list":\[{"cqn":[0-9]*' | grep -o '[0-9]*$' |
        sed 's/^/--cq /'
}
device_of_nodeB() { echo "--device simhca0"; }

# ends_job EVENT TARGET-FUNCTION MESSAGE-REGEX: a held 2x1 job, EVENT raised on nodeB once it is connected, then
# released: it must end with an error status and a message matching MESSAGE-REGEX.
ends_job() {
    local event=$1 target=$2 message=$3 out="$WORKDIR/$1" args rc job
    rm -f "$WORKDIR/release"
    MPIRUN_TIMEOUT=120 HOLD_FILE="$WORKDIR/release" XRC_MPIRUN_ARGS="-x HOLD_FILE" \
        xrc_run "$out" nodeA:1,nodeB:1 self,vader,xrc "$MPI_DIR/hold" &
    job=$!
    wait_for_line "$out.raw" '^hold: connected' 60 || { kill $job; wait $job; fail "$event: the job never connected"; }
    args=$($target)
    [ -n "$args" ] || { touch "$WORKDIR/release"; wait $job; fail "$event: nothing on nodeB to raise it on"; }
    # shellcheck disable=SC2086
    sc exec nodeB "$SIMHCA_CTL" fault event "$event" $args >/dev/null || fail "$event: injection failed"
    touch "$WORKDIR/release"
    wait $job
    rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "$event ($args): the job did not end with an error (exit $rc)"
    grep -qiE 'segmentation fault|signal 11|core dumped' "$out" && fail "$event: a process crashed"
    grep -qE "$message" "$out" || fail "$event ($args): no message matching '$message'"
    info "$event ($args): exit $rc, $(grep -m1 -E "$message" "$out")"
}

ends_job SRQ_ERR srq_of_nodeB 'btl:xrc: .*nodeB: simhca0:1: .*SRQ_ERR'
ends_job CQ_ERR cq_of_nodeB 'btl:xrc: .*nodeB: simhca0:1: .*CQ_ERR'
ends_job DEVICE_FATAL device_of_nodeB 'btl:xrc: .*nodeB: simhca0:1: .*DEVICE_FATAL'
sleep 1
expect_no_objects
info "PASS"
