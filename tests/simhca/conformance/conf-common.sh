# SPDX-License-Identifier: BSD-3-Clause
# Sourced by every conformance script: a private simhcad for this script, free TCP ports, bounded runs of
# server/client tool pairs, feature gates, and a summary. Nothing outlives the script: every process it
# starts is recorded and stopped by pid in the EXIT trap.
#
# Environment (Makefile.am sets the first four from the build tree):
#   SIMHCA_LIBDIR   directory with our libibverbs.so.1        SIMHCAD      the daemon binary
#   SIMHCA_CTL      simhca-ctl                               CONF_PROBE   the conf-probe binary
#   SIMHCA_CONF_FORCE=1   run every case even when its feature probe fails (to see the real failures)
#   SIMHCA_CONF_KEEP=1    keep the scratch directory with every tool's output

me=$(basename "$0" .sh)
top=$(cd "$(dirname "$0")/../../.." && pwd)
: "${SIMHCA_LIBDIR:=$top/src/simhca/lib/.libs}"
: "${SIMHCAD:=$top/src/simhca/simhcad}"
if [ -z "${SIMHCA_CTL:-}" ]; then
    for c in "$top/src/simhca/simhca-ctl" "$top/src/simhca/ctl/simhca-ctl"; do
        [ -x "$c" ] && SIMHCA_CTL=$c && break
    done
fi
: "${CONF_PROBE:=./conf-probe}"
PY=/usr/bin/python3   # Debian's interpreter (pyverbs is installed for it)

skip_all() { echo "SKIP: $me: $*"; exit 77; }
[ -e "$SIMHCA_LIBDIR/libibverbs.so.1" ] || skip_all "software HCA library not built ($SIMHCA_LIBDIR)"
[ -x "$SIMHCAD" ] || skip_all "simhcad not built ($SIMHCAD)"
[ -n "${SIMHCA_CTL:-}" ] && [ -x "$SIMHCA_CTL" ] || skip_all "simhca-ctl not built"
[ -x "$CONF_PROBE" ] || skip_all "conf-probe not built ($CONF_PROBE)"

. "$top/tests/lib/hca.sh"   # hca_daemon_start/stop, hca_is_empty (POSIX sh, like this file)
scratch=$(mktemp -d "/tmp/$me.XXXXXX") || exit 99
pids=""            # every background process we started, stopped in cleanup
daemon_pid=""
passed=0 failed=0 skipped=0

cleanup() {
    # A script with more to stop (conf-two-node's cluster) defines extra_cleanup.
    command -v extra_cleanup > /dev/null 2>&1 && extra_cleanup
    for p in $pids; do kill -TERM "$p" 2>/dev/null; done
    for p in $pids; do wait "$p" 2>/dev/null; done
    # The contract says simhcad exits within 2 s of SIGTERM; hca_daemon_stop gives it 5, then makes sure.
    hca_daemon_stop "$daemon_pid" || echo "FAIL: $me: simhcad (pid $daemon_pid) ignored SIGTERM for 5 s; killed it"
    [ "${SIMHCA_CONF_KEEP:-0}" = 1 ] && echo "outputs kept in $scratch" || rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A private daemon (single node, no fabric) on a unique instance, so concurrent tests never meet; the
# library finds it through the same SIMHCA_INSTANCE.
start_daemon() {
    SIMHCA_INSTANCE="conf.$me.$$"
    export SIMHCA_INSTANCE
    export LD_LIBRARY_PATH="$SIMHCA_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    hca_daemon_start "$scratch/simhcad.log" --node n1
    local rc=$?
    daemon_pid=$hca_daemon_pid
    [ $rc -eq 0 ] || { echo "FAIL: $me: simhcad did not start"; exit 1; }
}

# A TCP port nobody listens on now (the kernel picks it; the tools bind it a moment later).
free_port() {
    $PY -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
}

# Is anything listening on TCP port $1 (IPv4 or IPv6)?
listening() {
    hex=$(printf '%04X' "$1")
    awk -v p=":$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# Feature gate: feature_ok FEATURE -> 0 if conf-probe moves data with it (cached), else 1 with the reason
# in $why. SIMHCA_CONF_FORCE=1 says yes to everything. PROBE_PREFIX runs the probe elsewhere (in a node).
feature_ok() {
    [ "${SIMHCA_CONF_FORCE:-0}" = 1 ] && return 0
    cache="$scratch/probe.$1"
    if [ ! -e "$cache" ]; then
        # shellcheck disable=SC2086
        if timeout 30 ${PROBE_PREFIX:-} "$CONF_PROBE" "$1" > "$cache.out" 2>&1 < /dev/null; then echo ok > "$cache"
        else echo "feature '$1' not working yet: $(head -1 "$cache.out")" > "$cache"; fi
    fi
    why=$(cat "$cache")
    [ "$why" = ok ]
}

# Gate a case on several features; records a SKIP and returns 1 when one is missing.
gate() {
    label=$1
    shift
    for f in "$@"; do
        if ! feature_ok "$f"; then
            echo "SKIP: $label ($why)"
            skipped=$((skipped + 1))
            return 1
        fi
    done
    return 0
}

# known_gap LABEL -> 0 and the reason in $gap when known-gaps.txt lists the case (see that file).
known_gap() {
    gap=""
    [ -r "$gaps_file" ] || return 1
    while IFS='|' read -r pattern reason; do
        case "$pattern" in '#'* | '') continue ;; esac
        # shellcheck disable=SC2254
        case "$1" in $pattern) gap=$reason; return 0 ;; esac
    done < "$gaps_file"
    return 1
}
gaps_file="$(dirname "$0")/known-gaps.txt"
known=0

result() { # result LABEL OK(0/1) [files to show on failure...]
    label=$1 ok=$2
    shift 2
    if [ "$ok" = 0 ]; then
        echo "PASS: $label"
        known_gap "$label" && echo "  now passes: remove it from known-gaps.txt ($gap)"
        passed=$((passed + 1))
    elif known_gap "$label"; then
        echo "KNOWN-GAP: $label ($gap)"
        known=$((known + 1))
    else
        echo "FAIL: $label"
        for f in "$@"; do
            [ -s "$f" ] && { echo "  --- $(basename "$f") (last lines)"; tail -15 "$f" | sed 's/^/  | /'; }
        done
        failed=$((failed + 1))
    fi
}

# perftest -R has a start-up race on every fabric: after the out-of-band handshake the server creates its
# RDMA CM listener while the client resolves and connects, and a client that gets there first is refused
# (REJ "invalid service ID" = 8, or SIDR "unsupported" = 1, exactly what the IB CM answers). perftest then
# retries, but perftest 4.5's retry reuses the ids it has just freed and dies (SIGSEGV in
# rdma_resolve_addr). A client that failed exactly so is run again with a fresh server (at most four times), and
# the log says so; any other failure counts.
CM_RACE_RETRIES=4
cm_startup_race() { # CLIENT_OUTPUT: did the client lose perftest's start-up race?
    grep -qE 'RDMA_CM_EVENT_(UNREACHABLE; error: 1|REJECTED; error: 8)\.' "$1"
}
cm_race_restart() { # LABEL SERVER_PID ATTEMPT: stop the server (it waits for a client that is gone), say so
    kill -TERM "$2" 2>/dev/null
    wait "$2" 2>/dev/null
    echo "NOTE: $1: the client's request reached the server before its RDMA CM listener (perftest -R" \
        "start-up race, see conf-common.sh); attempt $3 of $((CM_RACE_RETRIES + 1)) repeated"
}

# wait_listening PORT PID: until something listens on TCP PORT, at most 10 s, or until PID is gone.
wait_listening() {
    _i=0
    while ! listening "$1" && [ $_i -lt 100 ] && kill -0 "$2" 2>/dev/null; do _i=$((_i + 1)); sleep 0.1; done
}

# run_pair LABEL SECONDS PORT SERVER_CMD... -- CLIENT_CMD...
# Starts the server, waits until it listens on PORT, runs the client against localhost, and passes if
# both exit 0 within SECONDS. Extra clients can be started with run_clients (xsrq).
run_pair() {
    label=$1 secs=$2 port=$3
    shift 3
    server=""
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do server="$server $1"; shift; done
    shift
    out="$scratch/$(echo "$label" | tr -c 'A-Za-z0-9_.-' '_')"
    attempt=1
    while :; do
        # shellcheck disable=SC2086
        timeout -k 5 "$secs" $server > "$out.server" 2>&1 < /dev/null &
        spid=$!
        pids="$pids $spid"
        wait_listening "$port" "$spid"
        timeout -k 5 "$secs" "$@" > "$out.client" 2>&1 < /dev/null
        crc=$?
        if [ $crc -ne 0 ] && [ $attempt -le $CM_RACE_RETRIES ] && cm_startup_race "$out.client"; then
            cm_race_restart "$label" "$spid" $attempt
            attempt=$((attempt + 1))
            continue
        fi
        wait "$spid"
        src=$?
        break
    done
    [ $crc -eq 0 ] && [ $src -eq 0 ]
    result "$label" $? "$out.server" "$out.client"
    [ $crc -eq 124 ] || [ $src -eq 124 ] && echo "  (timed out after ${secs}s: server rc=$src client rc=$crc)"
    return 0
}

# Final line in the plain "N passed, N failed, N skipped" form, and the Automake exit status.
finish() {
    echo "$me: $passed passed, $failed failed, $skipped skipped"
    [ $known -gt 0 ] && echo "$me: $known known gaps (failed as expected, see known-gaps.txt)"
    [ $failed -gt 0 ] && exit 1
    [ $passed -eq 0 ] && [ $known -eq 0 ] && exit 77
    exit 0
}
