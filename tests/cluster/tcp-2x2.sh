#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise). 2 simulated nodes x 2 ranks: layout per node, then allpairs over
# ob1 + self,vader,tcp (every pair, 0 B .. 4 MiB, verified, nonblocking storm); down leaves nothing behind.
. "$(dirname "$0")/common.sh"
# The software HCA is not needed here (openib-baseline.sh covers it): keep this test independent of it.
sc up --nodes 2 --slots 2 --no-simhca || die "simcluster up failed"
record_ns
show_layout 2 2
run_allpairs 2 2 self,vader,tcp
sc down || die "simcluster down failed"
assert_gone
assert_ns_gone
info "PASS"
