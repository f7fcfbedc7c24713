#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# cm-sim smoke run (seconds): the real connection manager at 8 nodes x 4 ranks converges and holds what the model
# says, for every pattern, on demand, under loss, under the INI cap and with ranks that compute before answering.
set -euo pipefail
sim=${CM_SIM:-./cm-sim}
run() {
    echo "cm-sim $*"
    "$sim" --nodes 8 --ppn 4 --check "$@" >/dev/null
}
run --pattern alltoall
run --pattern alltoall --loss 0.1 --cm-receives 16 --seed 3
run --pattern alltoall --owner spread
run --pattern alltoall --cap 2 --handles off
run --pattern ring
run --pattern stencil
run --pattern random --degree 5
run --pattern alltoall --progress every:500
run --pattern alltoall --progress compute:200000
run --pattern alltoall --progress compute:200000 --service-thread
# The same seed gives the same run.
a=$("$sim" --nodes 8 --ppn 4 --loss 0.2 --seed 9 | grep -v -e wall_s -e rss_mib)
b=$("$sim" --nodes 8 --ppn 4 --loss 0.2 --seed 9 | grep -v -e wall_s -e rss_mib)
[ "$a" = "$b" ] || { echo "cm-sim: two runs with one seed differ"; exit 1; }
echo "cm-sim smoke: ok"
