#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The campaign's own checks, checked (no root, no cluster, about 20 s):
#  1. the workload's checker: chaos_work on one node over vader (nothing of btl xrc), once clean (every message,
#     block and counter verified: exit 0 and "chaos: verdict OK"), then once per kind of violation a rank commits on
#     purpose (--inject): the run must exit non-zero and report exactly that kind;
#  2. the driver's drawing and verdict rules (chaos --self-test): a seed gives the same shape and schedule every
#     time, every draw keeps its invariants, the expected verdict follows docs/chaos.md's rules on hand-made
#     schedules, and the end-message rule accepts and refuses the lines it should.
set -u
T=chaos-selftest
HERE=$(cd "$(dirname "$0")" && pwd)
TOP_SRCDIR=${TOP_SRCDIR:-$(cd "$HERE/../.." && pwd)}
TOP_BUILDDIR=${TOP_BUILDDIR:-$TOP_SRCDIR/build}
MPIRUN=${MPIRUN:-mpirun}
WORK=$TOP_BUILDDIR/tests/chaos/chaos_work
[ -x "$WORK" ] || { echo "FAIL: $T: $WORK is not built"; exit 1; }
# root, no binding, oversubscribed, idle ranks yielding (Open MPI 4.1's and 5.0's launchers alike)
. "$TOP_SRCDIR/src/simcluster/simcluster-ompi-env"
simcluster_ompi_env
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failed=0
fail() { echo "FAIL: $T: $*"; failed=1; }

# run NAME ARGS...: 3 ranks x 2 threads over vader, 4 rounds, every size class and the one-sided part
run() {
    local name=$1
    shift
    timeout -k 5 120 "$MPIRUN" -np 3 --mca pml ob1 --mca btl self,vader "$WORK" --seed 7 --threads 2 --width 2 \
        --min-rounds 4 --large 300000 "$@" >"$out/$name" 2>&1
}

run clean
rc=$?
if [ $rc = 0 ] && grep -q '^chaos: verdict OK ranks=3 threads=2 ' "$out/clean" && ! grep -q VIOLATION "$out/clean"; then
    echo "$T: clean run: $(grep '^chaos: verdict' "$out/clean")"
else
    fail "the clean run did not pass (exit $rc)"
    head -20 "$out/clean" | sed 's/^/    /'
fi

# injected KIND: the kinds the checker must report for it (every one of them, and no other)
declare -A expect=([dup]="dup lost order" [lost]="lost order" [order]="order" [corrupt]="corrupt" [sum]="sum")
for kind in dup lost order corrupt sum; do
    run "$kind" --inject "$kind:1"
    rc=$?
    seen=$(grep -oE '^chaos: rank [0-9]+ VIOLATION [a-z]+ thread' "$out/$kind" | awk '{ print $5 }' | sort -u | paste -sd' ')
    want=$(tr ' ' '\n' <<<"${expect[$kind]}" | sort -u | paste -sd' ')
    if [ $rc != 0 ] && [ $rc != 124 ] && [ "$seen" = "$want" ] && grep -q '^chaos: verdict VIOLATION ' "$out/$kind"; then
        echo "$T: injected $kind: exit $rc, reported: $seen ($(grep -m1 ' VIOLATION ' "$out/$kind"))"
    else
        fail "injected $kind: exit $rc, reported '$seen', expected '$want'"
        grep -v '^chaos: phase' "$out/$kind" | head -20 | sed 's/^/    /'
    fi
done

python3 "$HERE/chaos" --self-test || fail "chaos --self-test failed"
[ $failed = 0 ] && echo "PASS: $T"
exit $failed
