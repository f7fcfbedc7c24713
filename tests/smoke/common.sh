# SPDX-License-Identifier: BSD-3-Clause
# Shared set-up of the MPI smoke tests: load the plugin from the build tree (no install needed) next to
# Open MPI's own components, allow root (CI runs as root), and keep runs bounded.
# Expects BTL_XRC_BUILDDIR, OMPI_PKGLIBDIR and MPIRUN from the test harness (tests/smoke/Makefile.am).
set -u
export OMPI_MCA_mca_base_component_path="$BTL_XRC_BUILDDIR/components:$OMPI_PKGLIBDIR"
# root, no binding, oversubscribed, idle ranks yielding: for Open MPI 4.1's and 5.0's launchers alike
. "$(dirname "${BASH_SOURCE[0]}")/../../src/simcluster/simcluster-ompi-env"
simcluster_ompi_env
# Software-HCA selection must be explicit; these tests exercise the host's own libibverbs (no device here).
unset SIMHCA_INSTANCE
RING="$BTL_XRC_BUILDDIR/tests/smoke/ring"
failures=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# run_mpi OUTFILE ARGS... : mpirun bounded to 120 s; returns mpirun's exit status.
# Note: Open MPI 4.1.4's own help messages sent during a failing MPI_Init (bml "unreachable") are sometimes lost
# by mpirun ("ORTE_ERROR_LOG: Data unpack ... orte/util/show_help.c"); the tests never depend on those.
# Worse, mpirun itself sometimes crashes relaying such a message (a segfault in pmix_server_log_fn ->
# orte_rml_oob_send_buffer_nb, after "ORTE_ERROR_LOG ... show_help.c"); a run that ends that way is repeated (at
# most twice, said in the log), since it tells nothing about the BTL. Any other crash fails the test.
run_mpi() {
    local file=$1 attempt status
    shift
    for attempt in 1 2 3; do
        timeout -k 5 120 "$MPIRUN" "$@" >"$file" 2>&1
        status=$?
        if [ $status -ne 0 ] && grep -q 'show_help.c' "$file" && grep -q 'pmix_server_log_fn' "$file"; then
            echo "note: mpirun crashed relaying a help message (Open MPI 4.1.4 + PMIx); run $attempt repeated"
            continue
        fi
        break
    done
    return $status
}

# A crash shows as a signal exit status or the runtime's own words for it.
no_crash() {
    local status=$1 file=$2 what=$3
    if [ "$status" -ge 124 ] || grep -qE 'Segmentation fault|core dumped|signal [0-9]+ \(|Aborted' "$file"; then
        fail "$what: crashed or hung (exit $status)"
        sed 's/^/    /' "$file" | head -40
        return 1
    fi
    return 0
}

finish() {
    if [ "$failures" -ne 0 ]; then
        echo "$failures check(s) failed"
        exit 1
    fi
    exit 0
}
