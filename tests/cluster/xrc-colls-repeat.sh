#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. Not part of `make check`: a reproducer for rare hangs of
# the collectives job of xrc-colls-onesided.sh. Runs tests/mpi/collectives over self,vader,xrc on
# $COLLS_HOSTS (default nodeA:2,nodeB:2) $COLLS_REPS times (default 50) on one cluster of 4 nodes x 3 slots (as
# xrc-colls-onesided.sh makes), each bounded by MPIRUN_TIMEOUT (90 s, as in make check), and counts the runs that
# passed, failed and timed out; extra mpirun arguments come from COLLS_MPIRUN_ARGS. Each run's wall time is
# printed; the output of a run that did not pass is kept in $COLLS_KEEP (default: the work dir, removed at the
# end) as colls.N.out. COLLS_FRESH=1: a new cluster for every run (the job is then the first one on freshly started
# nodes and daemons, as in xrc-colls-onesided.sh). COLLS_BTL (default self,vader,xrc) compares other BTLs.
# COLLS_ALT_COMPONENT_DIR=DIR: the odd runs load the plugin from DIR instead of the build tree (another build of
# mca_btl_xrc.so, e.g. the one before a fix: both then run under the same load, interleaved); each run's line says
# which.
# In the Debian 13 tree (Open MPI 5.0.7), from the top of the checkout, after scripts/check-debian13 --build-only:
#   B=$PWD/build-debian13/src/debian/build
#   scripts/check-debian13 --run env TOP_SRCDIR=$PWD TOP_BUILDDIR=$B SIMCLUSTER=$PWD/src/simcluster/simcluster \
#       MPIRUN=/usr/bin/mpirun OMPI_PKGLIBDIR=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi40 COLLS_REPS=100 \
#       bash tests/cluster/xrc-colls-repeat.sh
# On the host tree: make -C build/tests/cluster check TESTS=xrc-colls-repeat.sh (root).
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
reps=${COLLS_REPS:-50}
hosts=${COLLS_HOSTS:-nodeA:2,nodeB:2}
keep=${COLLS_KEEP:-}
up_cluster 4 3
pass=0 failed=0 hung=0
for ((i = 1; i <= reps; i++)); do
    if [ "${COLLS_FRESH:-0}" = 1 ] && [ $i -gt 1 ]; then
        expect_no_objects
        sc down >/dev/null || die "simcluster down failed"
        up_cluster 4 3 >/dev/null
    fi
    which=tree
    if [ -n "${COLLS_ALT_COMPONENT_DIR:-}" ] && [ $((i % 2)) = 1 ]; then
        which=alt
        export OMPI_MCA_mca_base_component_path="$COLLS_ALT_COMPONENT_DIR:$OMPI_PKGLIBDIR"
    else
        export OMPI_MCA_mca_base_component_path="$TOP_BUILDDIR/components:$OMPI_PKGLIBDIR"
    fi
    t0=$EPOCHREALTIME
    # shellcheck disable=SC2086
    XRC_MPIRUN_ARGS="${COLLS_MPIRUN_ARGS:-}" xrc_run "$WORKDIR/out" "$hosts" "${COLLS_BTL:-self,vader,xrc}" \
        "$MPI_DIR/collectives" \
        >/dev/null
    rc=$?
    wall=$(awk -v a="${t0/,/.}" -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.1f", b - a }')
    if [ $rc = 0 ] && grep -qE '^collectives: OK .*errors=0' "$WORKDIR/out"; then
        pass=$((pass + 1)) verdict=ok
    elif [ $rc = 124 ]; then
        hung=$((hung + 1)) verdict="timed out after ${MPIRUN_TIMEOUT}s"
    else
        failed=$((failed + 1)) verdict="failed (exit $rc)"
    fi
    [ "$verdict" = ok ] || { [ -n "$keep" ] && cp "$WORKDIR/out" "$keep/colls.$i.out"; }
    info "run $i/$reps on $hosts ($which plugin): $verdict, wall $wall s, load $(cut -d' ' -f1 /proc/loadavg)"
done
info "$reps runs on $hosts: $pass passed, $failed failed, $hung timed out"
expect_no_objects
[ $((failed + hung)) = 0 ] || die "$((failed + hung)) of $reps runs did not pass"
info "PASS"
