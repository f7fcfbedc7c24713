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

fault_ends_held_job SRQ_ERR nodeB "event SRQ_ERR @srq_of_nodeB" "" 'btl:xrc: .*nodeB: simhca0:1: .*SRQ_ERR'
fault_ends_held_job CQ_ERR nodeB "event CQ_ERR @cq_of_nodeB" "" 'btl:xrc: .*nodeB: simhca0:1: .*CQ_ERR'
fault_ends_held_job DEVICE_FATAL nodeB "event DEVICE_FATAL --device simhca0" "" \
    'btl:xrc: .*nodeB: simhca0:1: .*DEVICE_FATAL'
sleep 1
expect_no_objects
info "PASS"
