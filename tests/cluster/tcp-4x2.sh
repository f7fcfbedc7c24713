#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise). 4 simulated nodes x 2 ranks (8 ranks oversubscribing the real cores):
# layout per node, then allpairs over ob1 + self,vader,tcp; down leaves nothing behind.
. "$(dirname "$0")/common.sh"
# The software HCA is not needed here (openib-baseline.sh covers it): keep this test independent of it.
sc up --nodes 4 --slots 2 --no-simhca || die "simcluster up failed"
record_ns
show_layout 4 2
run_allpairs 4 2 self,vader,tcp
sc down || die "simcluster down failed"
assert_gone
assert_ns_gone
info "PASS"
