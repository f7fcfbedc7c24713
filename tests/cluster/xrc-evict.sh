#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. A cap on XRC send QPs per process far below what the
# pattern wants (btl_xrc_max_ini_qps 2, allpairs among 6 nodes, so every process talks to 5 nodes): connections
# are drained (nothing in flight is lost), closed on both sides and made again, round after round. Every payload
# is verified, the job's connection counters show evictions happened and that no process ever held more INI QPs
# than the cap, and nothing stays in any HCA.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 6 1
hosts=$(hosts_spec 6 1)
MPIRUN_TIMEOUT=240 XRC_MPIRUN_ARGS="--mca btl_xrc_connect on-demand --mca btl_xrc_max_ini_qps 2 --mca btl_xrc_verbose 10" \
    xrc_run "$WORKDIR/out" "$hosts" self,vader,xrc "$MPI_DIR/allpairs" --expect "$hosts" ||
    die "allpairs with btl_xrc_max_ini_qps 2 failed"
expect_line "$WORKDIR/out" '^allpairs: OK .*errors=0' "allpairs 6x1, at most 2 INI QPs per process"
[ "$(counters_modules "$WORKDIR/out")" = 6 ] || die "expected the counters of each of the 6 processes"
most=$(counter "$WORKDIR/out" ini_qps_peak | sort -n | tail -1)
evicted=$(counter_sum "$WORKDIR/out" evictions)
[ "$most" -le 2 ] || die "a process held $most INI QPs (cap 2)"
[ "$evicted" -gt 0 ] || die "no connection was ever evicted"
info "INI QPs per process at most $most (cap 2); $evicted evictions in all, every payload verified"
expect_no_objects
info "PASS"
