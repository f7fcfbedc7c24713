#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. A peer node that vanishes (all its traffic dropped) is
# reported through the error path with the device and port, and the job ends with a non-zero status: no hang,
# no silent drop. Nothing stays in any node's HCA afterwards.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2
# btl_xrc_outage_limit 0: a peer unreachable past the retry budget ends the job (with the limit, the job would wait
# that long for the path to come back: xrc-outage.sh).
retries="--mca btl_xrc_timeout 12 --mca btl_xrc_retry_count 3 --mca btl_xrc_outage_limit 0"
XRC_MPIRUN_ARGS="$retries" fault_ends_held_job "peer lost" nodeA "drop nodeB" "restore nodeB" \
    'btl:xrc: .*simhca0:1: .*transport retry counter exceeded'

# The same in on-demand mode, where the process has no map of the job: a failed send nobody waits for (an inline
# send, its data in the work request) is reported with the node, rank and host it went to, not a crash.
XRC_MPIRUN_ARGS="$retries --mca btl_xrc_connect on-demand" \
    fault_ends_held_job "peer lost, on demand" nodeA "drop nodeB" "restore nodeB" \
    'btl:xrc: .*simhca0:1: .*transport retry counter exceeded'

# A last message still draining in MPI_Finalize when its peer's node is lost: reported, and the job does not exit 0.
HOLD_LAST_SEND=1 XRC_MPIRUN_ARGS="-x HOLD_LAST_SEND $retries" \
    fault_ends_held_job "last message lost at finalize" nodeA "drop nodeB" "restore nodeB" \
    'btl:xrc: nodeA: simhca0:1: .*failed: .*\(during MPI_Finalize'
expect_no_objects
info "PASS"
