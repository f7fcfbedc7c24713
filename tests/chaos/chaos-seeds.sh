#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. A few fixed schedules of the fault campaign (docs/chaos.md),
# chosen short and covering its three outcomes' machinery: each runs on its own private simulated cluster, and the
# test passes when none is a VIOLATION. CHAOS_CHECK_SEEDS replaces the list. Each seed's logs stay in
# BUILD/tests/chaos/logs/seed-S; `tests/chaos/chaos --seed S` replays one.
#   19  2x1, one rail, 4 threads, on demand, RGET + osc/rdma: a short port flap ridden through (OK)
#   2   2x1, one rail, 3 threads, RPUT: DEVICE_FATAL on nodeB's only device: the job ends naming it (CLEAN END)
#   6   4x1, two devices, INI QP cap 2 (evictions), RPUT + osc/pt2pt: a LID change, then 390 ms of delay (OK)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
TOP_SRCDIR=${TOP_SRCDIR:-$(cd "$HERE/../.." && pwd)}
TOP_BUILDDIR=${TOP_BUILDDIR:-$TOP_SRCDIR/build}
[ "$(id -u)" = 0 ] || { echo "SKIP: chaos-seeds: needs root (namespaces, mounts, veth pairs)"; exit 77; }
exec python3 "$HERE/chaos" --seeds "${CHAOS_CHECK_SEEDS:-19,2,6}" --build-dir "$TOP_BUILDDIR"
