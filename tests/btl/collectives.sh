#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Collectives over btl xrc: alltoall, allreduce, bcast, every element verified; with and without vader.
. "$(dirname "$0")/common.sh"
start_daemon
run_check "collectives 3 ranks self,xrc" '^collectives: OK .*errors=0' -np 3 --mca btl self,xrc "$MPI/collectives"
run_check "collectives 4 ranks self,vader,xrc" '^collectives: OK .*errors=0' -np 4 --mca btl self,vader,xrc \
    "$MPI/collectives"
finish
