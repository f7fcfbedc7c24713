#!/bin/bash
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
finish
