#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. The connection manager under stress and faults, on
# demand (every connection made by its first message):
#   a connection storm from cold: alltoall and friends among 8 nodes x 4 ranks, every process connecting to
#     every other node at once;
#   datagrams delayed (nodeB's traffic 100 ms late each way) and lost (all of nodeB's traffic dropped while the
#     first connections are being made, restored a second later): retransmission with backoff gets through, and
#     duplicates are answered with the connection already made;
#   a peer that never answers (nodeB's traffic dropped for good): the job ends, within the connect timeout, with
#     an error naming the peer, node, device, port and reason, and a non-zero status;
# verified payloads throughout, and nothing left in any HCA.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 8 4
od="--mca btl_xrc_connect on-demand --mca btl_xrc_verbose 10"

XRC_MPIRUN_ARGS="$od" xrc_run "$WORKDIR/out" "$(hosts_spec 8 4)" self,vader,xrc "$MPI_DIR/collectives" ||
    die "collectives on 8x4 (a connection storm) failed"
expect_line "$WORKDIR/out" '^collectives: OK .*errors=0' "collectives 8x4 from cold, on demand"
info "storm: $(counter_sum "$WORKDIR/out" connection_attempts) connections made by 32 processes, $(counter_sum "$WORKDIR/out" cm_retransmissions) datagrams sent again"

sc exec nodeA "$SIMHCA_CTL" fault delay nodeB 100 >/dev/null || die "fault delay failed"
rm -f "$WORKDIR/release"
touch "$WORKDIR/release"  # hold: connect every pair, check, and end at once
HOLD_FILE="$WORKDIR/release" XRC_MPIRUN_ARGS="-x HOLD_FILE $od" \
    xrc_run "$WORKDIR/out" nodeA:2,nodeB:2 self,vader,xrc "$MPI_DIR/hold"
rc=$?
sc exec nodeA "$SIMHCA_CTL" fault undelay nodeB >/dev/null
[ $rc = 0 ] || die "hold with nodeB's traffic 100 ms late failed"
expect_line "$WORKDIR/out" '^hold: connected .*errors=0' "every pair of 2x2 connected and checked, nodeB 100 ms late each way"
info "delayed: $(counter_sum "$WORKDIR/out" cm_retransmissions) datagrams retransmitted in all, $(counter_sum "$WORKDIR/out" cm_duplicates) duplicates answered or ignored"

sc exec nodeA "$SIMHCA_CTL" fault drop nodeB >/dev/null || die "fault drop failed"
XRC_MPIRUN_ARGS="$od" xrc_run "$WORKDIR/out" nodeA:2,nodeB:2 self,vader,xrc "$MPI_DIR/allpairs" --expect nodeA:2,nodeB:2 &
job=$!
sleep 3  # (mpirun starts, MPI_Init, first CONNECTs lost: not a timing the result depends on)
sc exec nodeA "$SIMHCA_CTL" fault restore nodeB >/dev/null
wait $job || die "allpairs with nodeB's traffic dropped while connecting failed"
expect_line "$WORKDIR/out" '^allpairs: OK .*errors=0' "allpairs 2x2, nodeB unreachable for its first connections"

sc exec nodeA "$SIMHCA_CTL" fault drop nodeB >/dev/null || die "fault drop failed"
MPIRUN_TIMEOUT=60 XRC_MPIRUN_ARGS="--mca btl_xrc_connect on-demand --mca btl_xrc_connect_timeout 3" \
    xrc_run "$WORKDIR/out" nodeA:1,nodeB:1 self,vader,xrc "$MPI_DIR/allpairs"
rc=$?
sc exec nodeA "$SIMHCA_CTL" fault restore nodeB >/dev/null
[ $rc -ne 0 ] && [ $rc -ne 124 ] || die "a peer that never answers: the job did not end cleanly (exit $rc)"
grep -q 'btl:xrc: nodeA: simhca0:1: cannot connect to node .* (host nodeB) through rank 1: no answer from rank 1.s connection manager within 3 s' "$WORKDIR/out" ||
    die "a peer that never answers: no error naming the peer, node, device, port and reason"
info "never answers: $(grep -m1 'cannot connect to node' "$WORKDIR/out") (exit $rc)"
expect_no_objects
info "PASS"
