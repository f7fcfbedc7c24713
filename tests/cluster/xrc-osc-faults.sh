#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. Faults under osc/rdma traffic over xrc (rma_stream: only
# one-sided operations in flight, 2 nodes x 2): a peer node that vanishes (all its traffic dropped) and a port that
# goes down each end the job within the test's time bound with a non-zero status and a message naming the node,
# device and port, and for the lost node the one-sided operation that failed and its peer; no hang, no silent drop.
# Nothing stays in any node's HCA afterwards. openib's behaviour on the same fault is shown as a comparison.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
osc_rdma_setup
up_cluster 2 2

# fault_run NAME BTL FAULT-NODE FAULT... : rma_stream on nodeA:2,nodeB:2 over BTL; once it runs, FAULT is injected
# on FAULT-NODE's HCA. Leaves the job's output in $WORKDIR/NAME and its exit status in $rc.
fault_run() {
    local name=$1 btl=$2 node=$3 job
    shift 3
    local args="--mca osc rdma --mca osc_rdma_btls $btl -x RMA_STREAM_STOP"
    case $btl in
    xrc) args+=" --mca btl_xrc_timeout 12 --mca btl_xrc_retry_count 3 --mca btl_xrc_outage_limit 0" ;;
    openib) args+=" --mca btl_openib_allow_ib 1 --mca btl_openib_warn_no_device_params_found 0"
        args+=" --mca btl_openib_ib_timeout 12 --mca btl_openib_ib_retry_count 3" ;;
    esac
    rm -f "$WORKDIR/stop"
    MPIRUN_TIMEOUT=120 RMA_STREAM_STOP="$WORKDIR/stop" XRC_MPIRUN_ARGS="$args" \
        xrc_run "$WORKDIR/$name" nodeA:2,nodeB:2 "self,vader,$btl" "$MPI_DIR/rma_stream" >/dev/null &
    job=$!
    wait_for_line "$WORKDIR/$name.raw" '^rma_stream: running' 60 ||
        { touch "$WORKDIR/stop"; wait $job; die "$name: rma_stream did not start"; }
    sc exec "$node" "$SIMHCA_CTL" fault "$@" >/dev/null || die "$name: fault injection failed"
    wait $job
    rc=$?
    touch "$WORKDIR/stop"
}

# expect_clean_end NAME: non-zero, not the timeout, not a crash
expect_clean_end() {
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] || { cat "$WORKDIR/$1"; die "$1: the job did not end cleanly (exit $rc)"; }
    grep -q '^rma_stream: OK' "$WORKDIR/$1" && die "$1: the job finished as if nothing happened"
}

# a lost node: the operations toward it exhaust their retries
fault_run drop xrc nodeA drop nodeB
sc exec nodeA "$SIMHCA_CTL" fault restore nodeB >/dev/null
expect_clean_end drop
one_sided='(RDMA (read|write) of [0-9]+ bytes|atomic (fetch-and-add|compare-and-swap)) at 0x[0-9a-f]+'
grep -qE "btl:xrc: node[AB]: simhca0:1: $one_sided failed: transport retry counter exceeded .*\(peer rank [0-3] on node[AB]\)" \
    "$WORKDIR/drop" || { cat "$WORKDIR/drop"; die "drop: no error naming the node, device, port, operation and peer"; }
info "node lost (exit $rc): $(grep -m1 -E "btl:xrc: .*$one_sided failed" "$WORKDIR/drop")"

# a port that goes down: its processes hear it from the device, or from their operations failing first (then the
# report says the port is not active); their peers' operations toward it fail. Whoever reports first ends the job.
fault_run port-down xrc nodeB port-down
sc exec nodeB "$SIMHCA_CTL" fault port-up >/dev/null
expect_clean_end port-down
grep -qE "btl:xrc: nodeB: simhca0:1: (the port went down|$one_sided failed: .*the port is not active)|btl:xrc: nodeA: simhca0:1: $one_sided failed: .* \(peer rank [0-3] on nodeB\)" \
    "$WORKDIR/port-down" || { cat "$WORKDIR/port-down"; die "port-down: no error naming the port, or the operation and peer"; }
info "port down (exit $rc): $(grep -m1 -E 'btl:xrc: node[AB]: simhca0:1: ' "$WORKDIR/port-down")"
expect_no_objects

if [ "$OMPI_HAS_OPENIB" = 1 ]; then
    fault_run drop-openib openib nodeA drop nodeB
    sc exec nodeA "$SIMHCA_CTL" fault restore nodeB >/dev/null
    info "openib (comparison), node lost: exit $rc: $(grep -m1 -E 'error polling|retry|rror' "$WORKDIR/drop-openib")"
else
    info "openib (comparison): this Open MPI has no openib BTL"
fi
info "PASS"
