#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Smoke test of the benchmark suite (part of `make check`, < 30 s, no root, no cluster): the harness's
# parsers and model (run-bench --self-test), then every xbench benchmark on this machine over self,vader with
# few iterations and the data check on, and the hold handshake used by resource accounting.
# It checks that the programs run and print well-formed results; it never asserts timings.
set -u
here=$(cd "$(dirname "$0")" && pwd)
XBENCH=${XBENCH:-./xbench}
MPIRUN=${MPIRUN:-mpirun}
RUN_BENCH=${RUN_BENCH:-$here/run-bench}
# root, no binding, oversubscribed, idle ranks yielding: for Open MPI 4.1's and 5.0's launchers alike
. "$here/../../src/simcluster/simcluster-ompi-env"
simcluster_ompi_env
fail=0
ok() { echo "PASS: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

python3 "$RUN_BENCH" --self-test && ok "run-bench --self-test" || bad "run-bench --self-test"

[ -x "$XBENCH" ] || { echo "xbench not built ($XBENCH)"; exit 99; }
tmp=$(mktemp -d /tmp/bench-smoke.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
run() { timeout -k 5 60 "$MPIRUN" -np 2 --mca pml ob1 --mca btl self,vader "$XBENCH" "$@"; }

out=$(run all -q -c -m 1:65536 -t smoke 2>"$tmp/err"); rc=$?
n=$(printf '%s\n' "$out" | grep -c '^xbench,smoke,')
nbad=$(printf '%s\n' "$out" | grep '^xbench,' | awk -F, 'NF != 14 || $7 !~ /^[0-9.]+$/ || $14 == "FAIL"' | wc -l)
# 17 sizes x (latency, bw, bibw, alltoall, 2 mpairs metrics) + 4 startup lines (no remote peer on one node)
if [ $rc -eq 0 ] && [ "$n" -eq $((17 * 6 + 4)) ] && [ "$nbad" -eq 0 ]; then ok "xbench all ($n results, data checked)"
else bad "xbench all: rc=$rc results=$n malformed-or-failed=$nbad"; cat "$tmp/err"; fi

for b in latency bw bibw mpairs alltoall startup; do
    out=$(run $b -r 2 -i 5 -I 1 -w 1 -x 0 -m 4194304:4194304 -c 2>>"$tmp/err"); rc=$?
    if [ $rc -eq 0 ] && printf '%s\n' "$out" | grep -q '^xbench,'; then ok "xbench $b at 4 MiB"
    else bad "xbench $b at 4 MiB: rc=$rc"; fi
done

out=$(XBENCH_SELFTEST_CORRUPT=1 run latency -q -c -m 64:64 2>/dev/null); rc=$?
if [ $rc -eq 2 ] && printf '%s\n' "$out" | grep -q '^xbench,.*,FAIL$'; then ok "data check detects a corrupted byte"
else bad "data check missed a corrupted byte: rc=$rc"; fi

touch "$tmp/release"
out=$(run hold -d "$tmp" -H 10 2>>"$tmp/err"); rc=$?
if [ $rc -eq 0 ] && [ -e "$tmp/ready" ] && printf '%s\n' "$out" | grep -q '^xbench,-,hold,0,init,'; then ok "xbench hold"
else bad "xbench hold: rc=$rc"; fi

run nosuchbench >/dev/null 2>&1 && bad "unknown benchmark accepted" || ok "unknown benchmark rejected"
exit $fail
