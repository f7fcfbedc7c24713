# SPDX-License-Identifier: BSD-3-Clause
# Shared set-up of the BTL tests on the software HCA (one node: on-node peers reach each other through the
# HCA's loopback, like on a real adapter). Each test starts its own simhcad under a unique SIMHCA_INSTANCE,
# stops it by pid on exit, and checks that the daemon holds no object after every job.
# Expects BTL_XRC_BUILDDIR, OMPI_PKGLIBDIR, MPIRUN, SIMHCAD, SIMHCA_CTL, SIMHCA_LIBDIR from tests/btl/Makefile.am.
set -u
me=$(basename "$0" .sh)
export OMPI_MCA_mca_base_component_path="$BTL_XRC_BUILDDIR/components:$OMPI_PKGLIBDIR"
# root, no binding, oversubscribed, idle ranks yielding: for Open MPI 4.1's and 5.0's launchers alike
. "$(dirname "${BASH_SOURCE[0]}")/../../src/simcluster/simcluster-ompi-env"
simcluster_ompi_env
export SIMHCA_INSTANCE="btl-$me-$$"
MPI="$BTL_XRC_BUILDDIR/tests/mpi"
# A sanitizer error in any process fails the run it happens in.
sanitizer_report() { grep -qE '^(==[0-9]+==ERROR: AddressSanitizer|.*runtime error:)' "$1"; }
work=$(mktemp -d)
. "$(dirname "${BASH_SOURCE[0]}")/hca.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/counters.sh"  # counter_sum, ... of the jobs run with btl_xrc_verbose 10
. "$(dirname "${BASH_SOURCE[0]}")/../lib/tsan.sh"  # --enable-tsan: the runtime in every MPI process, its reports
trap 'stop_daemon; rm -rf "$work"' EXIT
trap 'exit 1' INT TERM

# In an --enable-asan build the plugin and the software HCA carry AddressSanitizer; the MPI programs do not, so
# the runtime is preloaded. Leak detection stays off for MPI processes (Open MPI itself does not free everything
# at exit); leaks of ours show as objects left in the HCA (expect_no_objects) and in the sanitized unit tests.
asan_args=()
if [ -n "${BTL_XRC_ASAN:-}" ]; then
    asan_args=(-x LD_PRELOAD="$(gcc -print-file-name=libasan.so)" -x ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
               -x UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1)
fi

# In an --enable-tsan build every job's processes run under ThreadSanitizer, their reports in $work/tsan/jobN
# (tests/lib/tsan.sh); run_check fails a job whose reports name our code. The daemon is instrumented too: its
# reports (in its log) are checked when the script finishes.
tsan_args=()
tsan_jobs=0
finish_checks() {
    tsan_on || return 0
    tsan_check_files "$me: simhcad" "$work/simhcad.log" ||
        fail "ThreadSanitizer reports name our code in the software HCA's daemon (above)"
}

# xrun OUTFILE MPIRUN-ARGS... : mpirun over the software HCA with ob1, bounded; returns mpirun's status.
xrun() {
    local file=$1
    shift
    if tsan_on; then
        tsan_jobs=$((tsan_jobs + 1))
        tsan_job_args "$work/tsan/job$tsan_jobs"
    fi
    timeout -k 5 "${XRUN_TIMEOUT:-180}" "$MPIRUN" -x SIMHCA_INSTANCE -x LD_LIBRARY_PATH="$SIMHCA_LIBDIR" \
        "${asan_args[@]}" "${tsan_args[@]}" --mca pml ob1 "$@" >"$file" 2>&1
}

# await_xrun JOB: the status of a job started with `xrun ... &` (JOB: that background shell's pid), for a job that
# must end with an error. Open MPI 4.1.4's mpirun (PMIx 4.2.2) can hang in its own teardown after it aborted a job
# (docs/upstream.md, 8): every rank has exited, mpirun never does. When mpirun has outlived the last of its ranks by
# 20 s, its threads' stacks go to the log (where gdb is installed), it is stopped, a NOTE says so, and the status is
# 200: the job ended, its launcher did not.
await_xrun() {
    local job=$1 launcher waited=0 t
    while kill -0 "$job" 2>/dev/null; do
        sleep 1
        t=$(pgrep -P "$job" -x timeout | head -1)
        launcher=${t:+$(pgrep -P "$t" | head -1)}
        # its ranks: its children that have not exited (an exited one stays a zombie until mpirun reaps it)
        if [ -n "$launcher" ] && ! ps --ppid "$launcher" -o stat= | grep -qv '^Z'; then
            waited=$((waited + 1))
        else
            waited=0
        fi
        if [ $waited -ge 20 ]; then
            echo "NOTE: mpirun (pid $launcher) outlived every rank of its job by 20 s: stopped (docs/upstream.md, 8)"
            if command -v gdb >/dev/null; then
                gdb -batch -p "$launcher" -ex 'thread apply all bt' 2>/dev/null | grep -E '^(#|Thread)' | sed 's/^/    /'
            fi
            kill -9 "$launcher" 2>/dev/null
            wait "$job"
            return 200
        fi
    done
    wait "$job"
}

# run_check NAME EXPECTED-LINE-REGEX MPIRUN-ARGS...
run_check() {
    local name=$1 expect=$2
    shift 2
    xrun "$work/out" "$@"
    local status=$?
    if [ $status -eq 0 ] && grep -qE "$expect" "$work/out" && ! sanitizer_report "$work/out"; then
        pass "$name: $(grep -E "$expect" "$work/out" | head -1)"
    else
        fail "$name (exit $status)"
        grep -v '^\[.*\] \[ *[0-9]*\]' "$work/out" | head -30 | sed 's/^/    /'
    fi
    if tsan_on; then
        if tsan_check "$work/tsan/job$tsan_jobs" "$name"; then
            pass "$name: no ThreadSanitizer report naming our code"
        else
            fail "$name: ThreadSanitizer reports naming our code (above)"
        fi
    fi
    expect_no_objects "$name"
}
