# SPDX-License-Identifier: BSD-3-Clause
# One software HCA daemon for a test, and the checks made against it (sourced): by tests/btl/common.sh, and by
# tests/package/root-inside.sh with the installed programs. Expects SIMHCAD, SIMHCA_CTL (the daemon and its
# control tool) and work (a scratch directory); the daemon runs under the caller's SIMHCA_INSTANCE and is
# stopped by its pid (stop_daemon; callers put it in their EXIT trap). Starting, stopping and the empty-HCA
# check are tests/lib/hca.sh's.
#
# Results: `fail MSG` records a failed check and goes on (the script's other checks still run); `pass MSG`
# records a passed one; `finish` ends the script, with status 1 when any check failed. (A test that must stop at
# once calls `die`, as tests/cluster and tests/package do.)
. "$(dirname "${BASH_SOURCE[0]}")/../lib/hca.sh"
daemon_pid=""
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

stop_daemon() {
    hca_daemon_stop "$daemon_pid"
    daemon_pid=""
}

start_daemon() {
    hca_daemon_start "$work/simhcad.log" --node n0
    local rc=$?
    daemon_pid=$hca_daemon_pid
    [ $rc -eq 0 ] || exit 1
}

# The daemon must hold nothing once a job is over (the kernel's uverbs cleanup, reproduced).
expect_no_objects() {
    local what=$1
    if hca_is_empty; then
        pass "$what: no object left in the HCA"
    else
        fail "$what: left behind: $hca_status"
        "$SIMHCA_CTL" list | head -20
    fi
}

# pvar_sum NAME FILE: the sum over the ranks of btl_xrc_NAME as the MPI programs print it ("pvar RANK NAME VALUE"),
# for the checks of the MPI_T interface itself (tests/package: the installed component publishes its variables).
# A test that checks what a job did by its counters reads tests/lib/counters.sh's one counters line instead.
pvar_sum() { awk -v n="$1" '$1 == "pvar" && $3 == n { s += $4 } END { print s + 0 }' "$2"; }

finish() {
    ! declare -F finish_checks >/dev/null || finish_checks  # the caller's last checks, when it has some
    [ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
    exit 0
}
