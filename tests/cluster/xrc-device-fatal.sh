#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. One of two devices dies mid-job and the job completes on
# the other: two rails as two devices of one port each (simcluster up --rails 2 --rail-layout devices: simhca0 and
# simhca1, each its own fabric), btl_xrc_rail_failover 1, verified all-to-all traffic at 2x2 (tests/mpi/steady with
# its numbered BURST stream, as in xrc-rail-loss.sh). nodeB's simhca1 reports DEVICE_FATAL and its link goes down
# with it (a dead adapter neither answers nor acknowledges: its peers' sends toward it fail after their retry
# budget, btl_xrc_timeout 14, about 0.5 s). nodeB's ranks give up the whole device's rail with a message naming
# host, device, port and the reason; nodeA's ranks fail over toward nodeB when their sends on simhca1 fail. What
# was queued or in flight on simhca1 goes out again over simhca0: every message verified, every numbered one
# delivered once and in order, and nothing stays in any node's HCA afterwards.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 2 2 --rails 2 --rail-layout devices

device_dies() {
    [ "$(grep -c 'btl:xrc: .*: rail failover on' "$WORKDIR/out.raw")" = 4 ] ||
        { touch "$WORKDIR/stop"; wait $job; die "not every process runs with rail failover on over its two devices"; }
    sc exec nodeB "$SIMHCA_CTL" fault event DEVICE_FATAL --device simhca1 >/dev/null || die "DEVICE_FATAL failed"
    sc exec nodeB "$SIMHCA_CTL" fault port-down --device simhca1 --port 1 >/dev/null || die "port-down failed"
    info "nodeB's simhca1 dead at $(date +%T.%N | cut -c1-12)"
}
device_link_up() { sc exec nodeB "$SIMHCA_CTL" fault port-up --device simhca1 --port 1 >/dev/null || die "port-up failed"; }
rail_lost_mid_steady device_dies device_link_up "nodeB's simhca1 dead mid-job"
lost='btl:xrc: nodeB: simhca1:1: rail lost: the device reported a fatal error \(DEVICE_FATAL\); traffic continues on simhca0:1'
[ "$(grep -cE "$lost" "$WORKDIR/out")" = 2 ] || die "not both of nodeB's processes said their simhca1 rail is lost"
grep -q 'btl:xrc: .*MPI_ABORT\|btl:xrc: .*giving up' "$WORKDIR/out" && die "the job was given up"
grep -qiE 'segmentation fault|signal 11|core dumped' "$WORKDIR/out" && die "a process crashed"
info "$(grep -m1 -E "$lost" "$WORKDIR/out")"
grep 'btl:xrc: nodeA: simhca1:1: rail lost toward node' "$WORKDIR/out" | head -2 | while read -r line; do info "$line"; done
modules=$(grep -E 'btl:xrc: simhca1:1 counters:' "$WORKDIR/out" | grep -c ' failovers=[1-9]')
[ "$modules" = 4 ] || die "$modules of 4 processes counted peers failed over on simhca1"
moved=$(grep -E 'btl:xrc: simhca1:1 counters:' "$WORKDIR/out" | grep -oE 'failover_sends=[0-9]+' | cut -d= -f2 |
    awk '{ s += $1 } END { print s + 0 }')
[ "$moved" -gt 0 ] || die "no send went over simhca0 for simhca1"
info "every process failed its simhca1 peers over; $moved sends went over simhca0 instead:" \
    "$(grep -E 'btl:xrc: simhca1:1 counters:' "$WORKDIR/out" | grep -oE ' failovers=[0-9]+ failover_sends=[0-9]+' | tr '\n' ';')"
sleep 1
expect_no_objects
info "PASS"
