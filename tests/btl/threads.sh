#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# MPI_THREAD_MULTIPLE over btl xrc (software HCA, one node, loopback): 4 and 8 threads per rank, each on its own
# communicator, Sendrecv of every size class with every other rank, wildcard receives and a collective, verified
# (tests/mpi/threads.c); 2 and 3 ranks. Then 3 ranks x 4 threads sharing MPI_COMM_WORLD and one tag, blocking sends of
# 8 B, 1000 B and 8000 B that any thread's receive may take, every message counted once (threads ... shared).
. "$(dirname "$0")/common.sh"
start_daemon
run_check "threads 2 ranks x 4 threads self,xrc" '^threads: OK .*errors=0' -np 2 --mca btl self,xrc "$MPI/threads" 4 2
run_check "threads 3 ranks x 8 threads self,xrc" '^threads: OK .*errors=0' -np 3 --mca btl self,xrc "$MPI/threads" 8 1
run_check "threads 3 ranks x 4 threads, one communicator and tag, self,xrc" '^threads: OK .*shared=1 errors=0' -np 3 \
    --mca btl self,xrc "$MPI/threads" 4 4 shared
finish
