#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs rdma-core's unmodified ibv_rc_pingpong, ibv_srq_pingpong and ibv_xsrq_pingpong (with and without -e,
# two sizes; -c where the tool checks data) between two processes on one node, through the software HCA.
# Starts a private simhcad (unique SIMHCA_INSTANCE) and stops it by pid; leaves no process behind.
set -u
: "${SIMHCAD:=../../src/simhca/simhcad}"
: "${SIMHCA_CTL:=../../src/simhca/simhca-ctl}"
: "${SIMHCA_LIBDIR:=../../src/simhca/lib/.libs}"
for t in ibv_rc_pingpong ibv_srq_pingpong ibv_xsrq_pingpong; do
    command -v $t >/dev/null || { echo "SKIP: $t not installed (Debian ibverbs-utils)"; exit 77; }
done
export SIMHCA_INSTANCE="pingpong-$$"
export LD_LIBRARY_PATH="$SIMHCA_LIBDIR"
work=$(mktemp -d /tmp/simhca-pingpong-XXXXXX)
. "$(dirname "$0")/../lib/hca.sh"
hca_daemon_pid=
server=
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null
    hca_daemon_stop "$hca_daemon_pid"
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
hca_daemon_start "$work/simhcad.log" --node pp --sysfs "$work/sysfs" || { echo "FAIL: simhcad did not start"; exit 1; }
# A port per run: the harness may run this next to other pingpong users. Below 32768, where the kernel's
# ephemeral ports start (ip_local_port_range): a port some other connection holds, or left in TIME_WAIT
# without SO_REUSEADDR, cannot be listened on.
port=$((20000 + $$ % 12000))
fail=0
run() { # NAME ARGS...
    local name=$1; shift
    port=$((port + 1))
    (cd "$work" && timeout 60 "$name" -d simhca0 -g 0 -p $port "$@" >"$work/server.out" 2>&1) &
    server=$!
    sleep 0.2
    local out
    out=$(cd "$work" && timeout 60 "$name" -d simhca0 -g 0 -p $port "$@" localhost 2>&1)
    local rc=$?
    wait "$server"; local src=$?
    server=
    if [ $rc -ne 0 ] || [ $src -ne 0 ]; then
        echo "FAIL: $name $* (client $rc, server $src)"; echo "$out"; cat "$work/server.out"
        fail=1
    else
        echo "PASS: $name $* :: $(echo "$out" | grep -E 'Mbit/sec|usec/iter|success' | tr '\n' ' ')"
    fi
}
for e in "" "-e"; do
    for size in 64 8192; do
        run ibv_rc_pingpong -n 300 -s $size -c $e
        run ibv_srq_pingpong -n 300 -s $size $e
        run ibv_xsrq_pingpong -n 300 -s $size $e
    done
done
exit $fail
