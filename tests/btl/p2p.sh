#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Point-to-point over btl xrc (software HCA, one node, loopback): every pair, 0 B .. 16 MiB across the eager,
# send (prepare_src) pipeline, RDMA-get (RGET) and RDMA-put (RPUT + pipeline) paths, data verified, plus the
# nonblocking storm with ANY_SOURCE.
. "$(dirname "$0")/common.sh"
start_daemon
run_check "allpairs 2 ranks self,xrc, to 16 MiB (RGET)" '^allpairs: OK .*errors=0' -np 2 --mca btl self,xrc \
    "$MPI/allpairs" --max-size 16777216
run_check "allpairs 2 ranks, to 16 MiB, put only (RPUT, pipeline)" '^allpairs: OK .*errors=0' -np 2 --mca btl self,xrc \
    --mca btl_xrc_flags send,put,inplace "$MPI/allpairs" --max-size 16777216
run_check "allpairs 3 ranks self,xrc" '^allpairs: OK .*errors=0' -np 3 --mca btl self,xrc "$MPI/allpairs"
# Send path without RDMA: every message through send/recv fragments (the pipeline of max_send_size pieces).
run_check "allpairs 2 ranks, to 16 MiB, no RDMA" '^allpairs: OK .*errors=0' -np 2 --mca btl self,xrc \
    --mca btl_xrc_flags send "$MPI/allpairs" --max-size 16777216
# No inline data, every send signaled: the slow paths of the send queue.
run_check "allpairs 2 ranks, no inline, signal each" '^allpairs: OK .*errors=0' -np 2 --mca btl self,xrc \
    --mca btl_xrc_max_inline_data 0 --mca btl_xrc_signal_interval 1 "$MPI/allpairs"
# Tiny send queues and receive queues: sends wait for credit, receivers rely on reposting (and RNR retry).
run_check "allpairs 3 ranks, small queues" '^allpairs: OK .*errors=0' -np 3 --mca btl self,xrc \
    --mca btl_xrc_send_queue_depth 16 --mca btl_xrc_signal_interval 4 \
    --mca btl_xrc_receive_queues 256,16,4:16384,16,4:65536,8,2 "$MPI/allpairs"
# Eager RDMA (rings the receiver polls): from the first message, 2-slot rings of 256 bytes, so slots wrap and
# senders run out of credit all the time. The counters at finalize (summed over the ranks) must show how many rings
# were asked for (granted + refused), that at least MIN were granted, that every grant and every refusal reached
# the asker, and that every message written into a ring was read from one.
run_eager() {
    local name=$1 want_asked=$2 want_min_granted=$3
    shift 3
    run_check "$name" '^allpairs: OK .*errors=0' "$@" --mca btl_xrc_verbose 10 ${rank_env[@]+"${rank_env[@]}"} \
        "$MPI/allpairs" --iters 3 --storm 64
    local asked granted refused used refusals ring_sent ring_read
    asked=$(counter_sum "$work/out" eager_ring_requests)
    granted=$(counter_sum "$work/out" eager_rings_granted)
    refused=$(counter_sum "$work/out" eager_rings_refused)
    used=$(counter_sum "$work/out" eager_rings_used)
    refusals=$(counter_sum "$work/out" eager_ring_refusals)
    ring_sent=$(counter_sum "$work/out" ring_sends)
    ring_read=$(counter_sum "$work/out" ring_receives)
    if [ "$asked" = "$want_asked" ] && [ $((granted + refused)) = "$asked" ] && [ "$granted" -ge "$want_min_granted" ] &&
       [ "$used" = "$granted" ] && [ "$refusals" = "$refused" ] && [ "$ring_sent" = "$ring_read" ] &&
       { { [ "$granted" = 0 ] && [ "$ring_sent" = 0 ]; } || { [ "$granted" != 0 ] && [ "$ring_sent" -gt 0 ]; }; }; then
        pass "$name: $asked rings asked for, $granted granted and used, $refused refused, $ring_sent messages through rings"
    else
        fail "$name: $asked rings asked for, $granted granted, $used used, $refused refused, $refusals refusals heard," \
             "$ring_sent messages written into rings, $ring_read read" \
             "(want $want_asked asked = granted + refused, >= $want_min_granted granted, every grant used, every refusal" \
             "heard, every ring message read)"
    fi
}
run_eager "allpairs 3 ranks, eager RDMA at once, 2 x 256-byte slots" 6 6 -np 3 --mca btl self,xrc \
    --mca btl_xrc_eager_rdma_threshold 1 --mca btl_xrc_eager_rdma_num 2 --mca btl_xrc_eager_rdma_slot_size 256
# One ring and one credit word per process: each asks one peer; a process asked twice refuses the second.
run_eager "allpairs 3 ranks, one eager RDMA ring per process" 3 2 -np 3 --mca btl self,xrc \
    --mca btl_xrc_eager_rdma_threshold 1 --mca btl_xrc_max_eager_rdma 1
run_eager "allpairs 2 ranks, eager RDMA off" 0 0 -np 2 --mca btl self,xrc --mca btl_xrc_use_eager_rdma 0
# Off on rank 1 only: rank 0 asks, rank 1 refuses; nobody writes into a ring. Rank 1 turns it off in its own
# environment (not an MPMD command line: Debian 13's mpirun, Open MPI 5.0.7, crashes on any "A : B").
rank_env=(bash -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && export OMPI_MCA_btl_xrc_use_eager_rdma=0; exec "$@"' rank-env)
run_eager "allpairs 2 ranks, eager RDMA off on one of them" 1 0 -np 2 --mca btl self,xrc \
    --mca btl_xrc_eager_rdma_threshold 1
unset rank_env
finish
