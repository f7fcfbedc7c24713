# SPDX-License-Identifier: BSD-3-Clause
# Shared helpers for the simulated-cluster tests (sourced). These tests need root (namespaces, mounts,
# veth): every test returns 77 (SKIP) when not root.
#
# Environment (set by Makefile.am, defaults for running a test by hand from the source tree):
#   SIMCLUSTER   the simcluster script          ALLPAIRS   the allpairs MPI program
#   TOP_BUILDDIR where src/simhca/{simhcad,lib/.libs} are looked for (VPATH builds)
set -u -o pipefail

T=$(basename "$0" .sh)
HERE=$(cd "$(dirname "$0")" && pwd)
TOP_SRCDIR=${TOP_SRCDIR:-$(cd "$HERE/../.." && pwd)}
TOP_BUILDDIR=${TOP_BUILDDIR:-$TOP_SRCDIR}
SIMCLUSTER=${SIMCLUSTER:-$TOP_SRCDIR/src/simcluster/simcluster}
ALLPAIRS=${ALLPAIRS:-$TOP_BUILDDIR/tests/mpi/allpairs}
MPIRUN=${MPIRUN:-mpirun}
MPIRUN_TIMEOUT=${MPIRUN_TIMEOUT:-90}

skip() { echo "SKIP: $T: $*"; exit 77; }
# die MSG: a failed step ends the test at once (what comes after it has nothing meaningful to check). As in every
# suite here, `die` stops and `fail` would record a failed check and go on.
die() { echo "FAIL: $T: $*"; exit 1; }
info() { echo "$T: $*"; }

[ "$(id -u)" = 0 ] || skip "needs root (namespaces, mounts, veth pairs)"
command -v unshare >/dev/null && command -v nsenter >/dev/null && command -v ip >/dev/null ||
    skip "needs unshare, nsenter (util-linux) and ip (iproute2)"
[ -x "$SIMCLUSTER" ] || die "simcluster not found at $SIMCLUSTER"

# VPATH builds: the software HCA lives in the build tree, not next to the script in the source tree
if [ -z "${SIMHCAD:-}" ] && [ -x "$TOP_BUILDDIR/src/simhca/simhcad" ]; then
    export SIMHCAD="$TOP_BUILDDIR/src/simhca/simhcad"
fi
if [ -z "${SIMHCA_LIBDIR:-}" ] && [ -e "$TOP_BUILDDIR/src/simhca/lib/.libs/libibverbs.so.1" ]; then
    export SIMHCA_LIBDIR="$TOP_BUILDDIR/src/simhca/lib/.libs"
fi

# One private cluster per test (tests may run in parallel); never under /tmp (nodes replace /tmp).
export SIMCLUSTER_STATE=/var/tmp/simcluster-check.$T.$$
WORKDIR=$SIMCLUSTER_STATE.work      # visible in every node (not under /tmp)
mkdir -p "$WORKDIR"

sc() { "$SIMCLUSTER" "$@"; }

. "$(dirname "${BASH_SOURCE[0]}")/../lib/tsan.sh"  # --enable-tsan: MPI processes and daemons under ThreadSanitizer

# Always tear down (by pid: simcluster down kills what runs in our namespaces), even on failure/interrupt.
teardown() {
    local rc=$?
    trap - EXIT INT TERM HUP
    # --enable-tsan: the nodes' software HCA daemons are instrumented; what they reported is in their logs
    if tsan_on && ls "$SIMCLUSTER_STATE"/nodes/*/simhcad.log >/dev/null 2>&1 &&
        ! tsan_check_files "$T: the nodes' simhcad" "$SIMCLUSTER_STATE"/nodes/*/simhcad.log; then
        echo "FAIL: $T: ThreadSanitizer reports name our code in the software HCA's daemons (above)"
        [ $rc = 0 ] && rc=1
    fi
    "$SIMCLUSTER" down >/dev/null 2>&1 || "$SIMCLUSTER" clean >/dev/null 2>&1
    rm -rf --one-file-system "$WORKDIR"
    rmdir "$SIMCLUSTER_STATE" 2>/dev/null
    rm -f "$SIMCLUSTER_STATE/.lock" 2>/dev/null && rmdir "$SIMCLUSTER_STATE" 2>/dev/null
    exit $rc
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# Harmless launcher race under load (see docs): drop exactly that line.
# (4.1's ORTE says plm:rsh, 5.0's PRRTE plm:ssh.)
filter_stderr() { grep -avE 'plm:(rsh|ssh): Warning: setpgid(.*) failed in parent with errno=' || true; }

# In an --enable-tsan build every job's processes run under ThreadSanitizer (tests/lib/tsan.sh), their reports in
# $WORKDIR/tsan/jobN.PID (jobs may run at once); a job whose reports name our code fails.
tsan_args=()
tsan_jobs=0

# mpirun_sim OUTFILE MPIRUN-ARGS...: run mpirun inside the head node, bounded by a timeout;
# stdout+filtered stderr go to OUTFILE (and to our log); returns mpirun's status (1 after a job whose
# ThreadSanitizer reports name our code).
mpirun_sim() {
    local out=$1 rc
    shift
    info "mpirun $*"
    if tsan_on; then
        tsan_jobs=$((tsan_jobs + 1))
        tsan_job_args "$WORKDIR/tsan/job$tsan_jobs.$BASHPID"
    fi
    # in the background + wait, so that a TERM/INT reaches our trap at once (teardown then stops the job)
    sc run timeout -k 5 "$MPIRUN_TIMEOUT" "$MPIRUN" "${tsan_args[@]}" "$@" >"$out.raw" 2>&1 </dev/null &
    wait $!
    rc=$?
    filter_stderr <"$out.raw" >"$out"
    cat "$out"
    [ $rc = 124 ] && info "mpirun timed out after ${MPIRUN_TIMEOUT}s"
    if tsan_on && ! tsan_check "$WORKDIR/tsan/job$tsan_jobs.$BASHPID" "$T job $tsan_jobs"; then
        info "ThreadSanitizer reports name our code (above): the job counts as failed"
        [ $rc = 0 ] && rc=1
    fi
    return $rc
}

need_allpairs() { [ -x "$ALLPAIRS" ] || die "allpairs not built at $ALLPAIRS (make -C tests/mpi)"; }

# the MPI program must be visible inside every node (it is unless it lives under /tmp)
case "$(readlink -m "$ALLPAIRS")" in
    /tmp/*) export SIMCLUSTER_SHARE="$(dirname "$(readlink -m "$ALLPAIRS")")${SIMCLUSTER_SHARE:+:$SIMCLUSTER_SHARE}" ;;
esac

# cluster_nodes: the running cluster's node names (nodeA..nodeZ, nodeAA..: what `sc exec` takes), one per line;
# cluster_hosts: their host names in the same order (the same, unless `up --hostnames` chose others)
cluster_nodes() {
    (eval "$(sc env | grep '^export SIMCLUSTER_NODES=')" && printf '%s\n' $SIMCLUSTER_NODES)
}
cluster_hosts() {
    (eval "$(sc env | grep '^export SIMCLUSTER_HOSTS=')" && printf '%s\n' ${SIMCLUSTER_HOSTS//,/ } | sed 's/:.*//')
}

hosts_spec() { # N P -> the first N hosts, P slots each: nodeA:P,nodeB:P,...
    cluster_hosts | head -n "$1" | sed "s/\$/:$2/" | paste -sd,
}

# check_layout OUT N P: the per-rank "host rank localrank localsize" lines match N nodes x P ranks, by slot
check_layout() {
    local out=$1 n=$2 p=$3 r host lr ls exp hosts
    mapfile -t hosts < <(cluster_hosts)
    [ "$(grep -c '^RANK ' "$out")" = $((n * p)) ] || die "expected $((n * p)) rank lines"
    for ((r = 0; r < n * p; r++)); do
        read -r _ host lr ls < <(awk -v r=$r '$1 == "RANK" && $3 == r { print $1, $2, $4, $5 }' "$out")
        exp=${hosts[r / p]:-}
        [ "$host" = "$exp" ] || die "rank $r ran on '$host', expected $exp"
        [ "$lr" = $((r % p)) ] || die "rank $r has local rank '$lr', expected $((r % p))"
        [ "$ls" = "$p" ] || die "rank $r has local size '$ls', expected $p"
    done
    info "layout ok: $n nodes x $p ranks (hostnames, local ranks, local sizes)"
}

# assert_gone: no process left in our namespaces, no holder of ours alive
assert_gone() {
    local left
    left=$(grep -l "SIMCLUSTER_HOLDER=$SIMCLUSTER_STATE:" /proc/[0-9]*/environ 2>/dev/null | tr '\n' ' ')
    [ -z "$left" ] || die "holders still alive after down: $left"
    [ ! -e "$SIMCLUSTER_STATE/nodes" ] || die "node state left in $SIMCLUSTER_STATE/nodes"
}

# record_ns: remember our namespaces (uts/net of every node + the fabric) to check later that they are gone
record_ns() {
    NS_IDS=$(cat "$SIMCLUSTER_STATE"/nodes/*/uts "$SIMCLUSTER_STATE"/nodes/*/net "$SIMCLUSTER_STATE/fabric.net" \
        2>/dev/null | sort -u)
    [ -n "$NS_IDS" ] || die "no namespaces recorded in $SIMCLUSTER_STATE"
}
# assert_ns_gone: no process is in any recorded namespace (so the namespaces are freed)
assert_ns_gone() {
    local users
    users=$(find /proc/[0-9]*/ns/uts /proc/[0-9]*/ns/net -maxdepth 0 -printf '%l %p\n' 2>/dev/null |
        grep -F "$NS_IDS" | awk '{print $2}' | cut -d/ -f3 | sort -u | tr '\n' ' ')
    [ -z "$users" ] || die "processes still in the cluster's namespaces: $users"
}

# run_allpairs N P BTLS [extra mpirun args...]: allpairs on N nodes x P ranks, checked
run_allpairs() {
    local n=$1 p=$2 btls=$3 t0 t1 out="$WORKDIR/allpairs.$1x$2.out"
    shift 3
    need_allpairs
    t0=$EPOCHREALTIME
    mpirun_sim "$out" --mca pml ob1 --mca btl "$btls" "$@" --host "$(hosts_spec "$n" "$p")" \
        "$ALLPAIRS" --expect "$(hosts_spec "$n" "$p")" || die "allpairs ${n}x${p} over $btls failed"
    t1=$EPOCHREALTIME
    grep -q '^allpairs: OK pairs=.* errors=0' "$out" || die "no OK line from allpairs ${n}x${p}"
    grep -q 'ERROR' "$out" && die "errors reported by allpairs ${n}x${p}"
    info "allpairs ${n}x${p} over $btls: ok (wall $(awk -v a="${t0/,/.}" -v b="${t1/,/.}" 'BEGIN { printf "%.2f", b - a }') s)"
}

# show_layout N P: each rank prints host, rank, local rank, local size; checked by check_layout
show_layout() {
    local n=$1 p=$2 out="$WORKDIR/layout.$1x$2.out"
    mpirun_sim "$out" --mca pml ob1 --mca btl self,vader,tcp --host "$(hosts_spec "$n" "$p")" \
        bash -c 'echo RANK $(hostname) $OMPI_COMM_WORLD_RANK $OMPI_COMM_WORLD_LOCAL_RANK $OMPI_COMM_WORLD_LOCAL_SIZE' ||
        die "layout job failed"
    check_layout "$out" "$n" "$p"
}
