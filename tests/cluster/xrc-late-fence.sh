#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. A launcher whose fences are no barriers (the PMIx fence
# shim: every data-less fence returns at once, as under Slurm 22.05's defaults, and nodeB's ranks leave the modex
# fence 2 s after the others): the other nodes leave MPI_Init and send to nodeB while nodeB's ranks have not even
# reached their wire-up. Nothing may be lost and no message may wait for an ACK timeout (a message sent to a TGT
# QP that is not ready would be dropped by the HCA and retransmitted only after one): the port counters
# local_ack_timeout_err of every node do not move, in eager and on-demand mode, for a ring and for allpairs. The
# time nodeB's ranks needed for their first exchange once they were in (connections made on the way) is reported.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
[ -e "$FENCE_SHIM" ] || die "the fence shim is not built ($FENCE_SHIM)"
up_cluster 3 2
hosts=nodeA:2,nodeB:2,nodeC:2
shim="-x LD_PRELOAD=$FENCE_SHIM -x FENCE_SHIM_LATE_HOST=nodeB -x FENCE_SHIM_DELAY_MS=2000"
for mode in eager on-demand; do
    before=$(ack_timeouts)
    XRC_MPIRUN_ARGS="$shim --mca btl_xrc_connect $mode" \
        xrc_run "$WORKDIR/out" "$hosts" self,vader,xrc "$MPI_DIR/ring" --stride 2 || die "ring ($mode) failed"
    [ "$(grep -c '^ring: rank .* ok .*errors=0' "$WORKDIR/out")" = 6 ] || die "ring ($mode): not every rank ok"
    grep -q 'fence-shim: nodeB released .* data fence late by 2000 ms' "$WORKDIR/out" ||
        die "ring ($mode): the shim did not delay nodeB"
    late=$(awk '/^ring: rank [23] ok/ { sub("first=", "", $5); print $5 }' "$WORKDIR/out" | paste -sd' ')
    XRC_MPIRUN_ARGS="$shim --mca btl_xrc_connect $mode" \
        xrc_run "$WORKDIR/out" "$hosts" self,vader,xrc "$MPI_DIR/allpairs" --expect "$hosts" ||
        die "allpairs ($mode) failed"
    expect_line "$WORKDIR/out" '^allpairs: OK .*errors=0' "allpairs $hosts ($mode, nodeB 2 s late)"
    after=$(ack_timeouts)
    [ "${before##* }" = "${after##* }" ] ||
        die "$mode: ACK timeouts spent (before: $before; after: $after)"
    info "$mode: no ACK timeout (local_ack_timeout_err total ${after##* }); nodeB's ranks 2 and 3 did their first ring exchange ${late} s after leaving MPI_Init"
done
expect_no_objects
info "PASS"
