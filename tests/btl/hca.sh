# SPDX-License-Identifier: BSD-3-Clause
# One software HCA daemon for a test, and the checks made against it (sourced): by tests/btl/common.sh, and by
# tests/package/root-inside.sh with the installed programs. Expects SIMHCAD, SIMHCA_CTL (the daemon and its
# control tool) and work (a scratch directory); the daemon runs under the caller's SIMHCA_INSTANCE and is
# stopped by its pid (stop_daemon; callers put it in their EXIT trap).
daemon_pid=""
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

stop_daemon() {
    if [ -n "$daemon_pid" ]; then
        kill -TERM "$daemon_pid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$daemon_pid" 2>/dev/null
        wait "$daemon_pid" 2>/dev/null
        daemon_pid=""
    fi
}

start_daemon() {
    "$SIMHCAD" --node n0 >"$work/simhcad.log" 2>&1 &
    daemon_pid=$!
    if ! timeout 15 "$SIMHCA_CTL" wait-ready --timeout 10 >/dev/null 2>&1; then
        echo "simhcad did not start:"; cat "$work/simhcad.log"
        exit 1
    fi
}

# The daemon must hold nothing once a job is over (the kernel's uverbs cleanup, reproduced).
expect_no_objects() {
    local what=$1 status
    status=$("$SIMHCA_CTL" status 2>&1 | sed -n 2p)
    if [ "$status" = "clients 0 pds 0 mrs 0 cqs 0 srqs 0 xrcds 0 qps 0" ]; then
        pass "$what: no object left in the HCA"
    else
        fail "$what: left behind: $status"
        "$SIMHCA_CTL" list | head -20
    fi
}

# pvar_sum NAME FILE: the sum over the ranks of btl_xrc_NAME as the MPI programs print it ("pvar RANK NAME VALUE")
pvar_sum() { awk -v n="$1" '$1 == "pvar" && $3 == n { s += $4 } END { print s + 0 }' "$2"; }

finish() {
    [ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
    exit 0
}
