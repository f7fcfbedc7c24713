# SPDX-License-Identifier: BSD-3-Clause
# POSIX sh: the conformance scripts (dash) source it too.
# The software HCA daemon for a test script (sourced): start one, stop it, and check that it holds nothing.
# Used by tests/btl/hca.sh (and through it tests/btl, tests/package), tests/simhca's scripts and their conformance
# suite, and tests/cluster (whose nodes' daemons simcluster starts: only the empty-HCA check is shared there).
# Needs SIMHCAD and SIMHCA_CTL (the daemon and its control tool). Defines no fail/pass: each suite reports results
# its own way (tests/btl/hca.sh says how).

# What `simhca-ctl status` prints on its second line for a daemon that holds no object: the kernel's cleanup of
# closed uverbs files, reproduced, means a finished job leaves exactly this.
HCA_EMPTY_STATUS="clients 0 pds 0 mrs 0 cqs 0 srqs 0 xrcds 0 qps 0"

# hca_daemon_start LOG SIMHCAD-ARGS...: starts "$SIMHCAD" SIMHCAD-ARGS in the background under the caller's
# SIMHCA_INSTANCE, its output in LOG, and waits until it answers. Sets hca_daemon_pid (also when it fails, so the
# caller's cleanup stops it). Returns 1 after printing the log's tail when it is not ready within 10 s.
hca_daemon_start() {
    local log=$1
    shift
    "$SIMHCAD" "$@" >"$log" 2>&1 &
    hca_daemon_pid=$!
    if ! timeout 15 "$SIMHCA_CTL" wait-ready --timeout 10 >/dev/null 2>&1; then
        echo "simhcad did not become ready within 10 s; its log:"
        tail -20 "$log" | sed 's/^/  | /'
        return 1
    fi
}

# hca_daemon_stop PID: SIGTERM, up to 5 s for it to exit (its contract says 2), then SIGKILL; reaped. Returns 1
# when it had to be killed.
hca_daemon_stop() {
    local pid=$1 rc=0
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null
        rc=1
    fi
    wait "$pid" 2>/dev/null
    return $rc
}

# hca_is_empty [STATUS-LINE]: true when the daemon of SIMHCA_INSTANCE (or the given status line) holds no object.
# Sets hca_status to the line it looked at.
hca_is_empty() {
    if [ $# -gt 0 ]; then hca_status=$1; else hca_status=$("$SIMHCA_CTL" status 2>&1 | sed -n 2p); fi
    [ "$hca_status" = "$HCA_EMPTY_STATUS" ]
}
