#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. A port that gets a new LID mid-job (a subnet manager
# re-sweep: `simhca-ctl fault lid`) is ridden through: verified all-to-all traffic at 2x2 while nodeB's port moves
# to a new LID; nodeB's ranks announce it through the connection manager, nodeA's move their paths to it (path
# migration), the job completes with every byte verified and the counters say so. Then connections made after the
# change: on demand, the even ranks talk while the odd ranks make no MPI call; nodeB's port moves again; then every
# pair exchanges, so the odd ranks' first connections (to and from the moved port) are made toward its new LID.
# Nothing stays in any node's HCA afterwards.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2

# moved_run OUT LID PROGRAM ARGS...: PROGRAM (which prints "<name>: traffic" once it flows and stops once
# $WORKDIR/stop exists) on nodeA:2,nodeB:2; 1 s into its traffic nodeB's port gets LID LID, 2 s later the stop file
# appears. Leaves the job's exit status in $rc (noflow: no traffic within 60 s).
moved_run() {
    local out=$1 lid=$2 program=$3
    shift 3
    rm -f "$WORKDIR/stop"
    xrc_run "$out" nodeA:2,nodeB:2 self,vader,xrc "$program" "$@" &
    local job=$!
    if ! wait_for_line "$out.raw" ': traffic' 60; then
        wait $job
        rc=noflow
        return
    fi
    sleep 1
    sc exec nodeB "$SIMHCA_CTL" fault lid --port 1 --lid "$lid" >/dev/null || die "fault lid $lid failed"
    info "nodeB's port moved to LID $lid at $(date +%T.%N | cut -c1-12)"
    sleep 2
    touch "$WORKDIR/stop"
    wait $job
    rc=$?
}

# expect_moved OUT WHAT MIN-MIGRATED LID: nodeB's 2 ranks announced once each, nodeA's 2 ranks heard it once each, paths moved.
expect_moved() {
    local announced heard migrated
    announced=$(counter "$1" lid_changes | grep -c '^1$')
    heard=$(counter "$1" peer_lid_changes | grep -c '^1$')
    migrated=$(counter_sum "$1" paths_migrated)
    [ "$announced" = 2 ] || die "$2: $announced of nodeB's 2 ranks counted one LID change"
    [ "$heard" = 2 ] || die "$2: $heard of nodeA's 2 ranks counted one peer LID change"
    [ "$migrated" -ge "$3" ] || die "$2: $migrated QP paths moved, expected at least $3"
    grep -q "btl:xrc: nodeB: simhca0:1: .*LID $(($4)) (was [0-9]*).*telling the job the new LID" "$1" ||
        die "$2: no message naming the new LID"
    grep -q 'btl:xrc: .* error\|MPI_ABORT\|btl:xrc: .*failed' "$1" && die "$2: an error was reported"
    info "$2: lid_changes=$(counter_sum "$1" lid_changes) peer_lid_changes=$(counter_sum "$1" peer_lid_changes)" \
        "paths_migrated=$migrated cm_rejected=$(counter_sum "$1" cm_rejected)"
}

# Steady all-to-all (eager connections): every INI QP toward nodeB and every TGT QP for nodeB's senders moves.
XRC_MPIRUN_ARGS="--mca btl_xrc_verbose 10" moved_run "$WORKDIR/out" 0x30 "$MPI_DIR/steady" 3 "$WORKDIR/stop"
[ $rc != noflow ] || die "no traffic in the steady job"
[ $rc = 0 ] || die "the job did not ride through the LID change (exit $rc)"
expect_line "$WORKDIR/out" '^steady: OK .*errors=0' "steady, nodeB's port moved to LID 0x30"
# nodeA's 2 ranks: an INI QP each toward nodeB, and the 2 TGT QPs of nodeB's senders (moved once each, by
# whichever holder looked first).
expect_moved "$WORKDIR/out" "steady" 4 0x30

# On demand, connections made after the change: the stop file is late_pairs' go. Before it only ranks 0 and 2
# are connected (rank 0's INI QP toward nodeB and the TGT QP it made for rank 2 move).
XRC_MPIRUN_ARGS="--mca btl_xrc_verbose 10 --mca btl_xrc_connect on-demand" \
    moved_run "$WORKDIR/late" 0x31 "$MPI_DIR/late_pairs" "$WORKDIR/stop"
[ $rc != noflow ] || die "no traffic in the late_pairs job"
[ $rc = 0 ] || die "connections made after the LID change failed (exit $rc)"
expect_line "$WORKDIR/late" '^late_pairs: OK .*errors=0' "late_pairs on demand, nodeB's port moved to LID 0x31 before the odd ranks connected"
expect_moved "$WORKDIR/late" "late_pairs" 2 0x31

sleep 1
expect_no_objects
info "PASS"
