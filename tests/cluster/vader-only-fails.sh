#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise). Proof that the nodes are separate machines for Open MPI: with only
# self,vader (shared memory) a job spanning two nodes must FAIL (unreachable peers), while the same job on
# one node works.
. "$(dirname "$0")/common.sh"
# The software HCA is not needed here (openib-baseline.sh covers it): keep this test independent of it.
need_allpairs
sc up --nodes 2 --slots 2 --no-simhca || die "simcluster up failed"
out=$WORKDIR/vader.out
if mpirun_sim "$out" --mca pml ob1 --mca btl self,vader --host nodeA:1,nodeB:1 "$ALLPAIRS" --quiet; then
    die "self,vader alone worked across two nodes: the nodes are not separate"
fi
[ "$(grep -c '^allpairs: OK' "$out")" = 0 ] || die "allpairs reported OK across nodes with self,vader"
grep -qiE 'unreachable|BTLs attempted|not reach' "$out" || info "note: failure without the usual unreachable message"
info "self,vader across nodes fails as expected"
run_allpairs 1 2 self,vader
info "PASS"
