#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. Two rails (simcluster up --rails 2: one device with two
# ports per node, each port on a fabric of its own, rail 2 set to FDR 4X against rail 1's EDR 4X):
# 1. allpairs at 4x2, verified; every process runs one module per rail, each advertising its port's data rate
#    (100000 and 54544 Mb/s), and both rails of every process carried bytes (its counters at finalize); what the
#    receiver writes (RPUT) splits between the rails by those rates;
# 2. collectives and one-sided (osc/rdma) at 2x2, verified;
# 3. nodeB's rail 2 down at start-up: its peers pair with it by fabric, not by position, so the job runs at 4x2
#    with no failed connection (a 10 s connect timeout would end it, not wait);
# 4. nodeB's rail 2 flaps during verified traffic: its rail-2 module holds and resumes, rail 1's module on every
#    process counts no hold, and the job completes.
# Nothing stays in any node's HCA.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 4 2 --rails 2
for node in $SIMCLUSTER_NODES_LIST; do
    sc exec "$node" "$SIMHCA_CTL" fault speed --speed 16 --width 2 --port 2 >/dev/null || die "cannot set $node's rail 2 speed"
done

# rail_bytes OUT PORT: how many processes' module on port PORT moved bytes (sent, written or read)
rail_bytes() {
    paste <(counter "$1" bytes_sent --port "$2") <(counter "$1" rdma_bytes_written --port "$2") \
        <(counter "$1" rdma_bytes_read --port "$2") | awk '$1 + $2 + $3 > 0' | grep -c .
}

# 1. Both rails used, each at its own rate.
XRC_MPIRUN_ARGS="--mca btl_xrc_verbose 10" \
    xrc_run "$WORKDIR/out" "$(hosts_spec 4 2)" self,vader,xrc "$MPI_DIR/allpairs" --expect "$(hosts_spec 4 2)" ||
    die "allpairs 4x2 over two rails failed"
expect_line "$WORKDIR/out" '^allpairs: OK .*errors=0' "allpairs 4x2, two rails"
[ "$(grep -cE 'using simhca0:1 \(LID [0-9]+, 100000 Mb/s\)' "$WORKDIR/out")" = 8 ] ||
    die "not every process advertised rail 1 at its EDR 4X rate (100000 Mb/s)"
[ "$(grep -cE 'using simhca0:2 \(LID [0-9]+, 54544 Mb/s\)' "$WORKDIR/out")" = 8 ] ||
    die "not every process advertised rail 2 at its FDR 4X rate (54544 Mb/s)"
r1=$(rail_bytes "$WORKDIR/out" 1) r2=$(rail_bytes "$WORKDIR/out" 2)
[ "$r1" = 8 ] && [ "$r2" = 8 ] || die "bytes moved on rail 1 by $r1 and on rail 2 by $r2 of 8 processes"
info "every process advertised 100000 and 54544 Mb/s and moved bytes on both rails; rail 1 / rail 2 bytes sent:" \
    "$(counter_sum "$WORKDIR/out" bytes_sent --port 1) / $(counter_sum "$WORKDIR/out" bytes_sent --port 2)"

# 1b. What the receiver writes (RPUT) is split by rate: ob1 weighs the rails by the bandwidth each module
# advertises (an RGET, the default protocol, reads a message over one rail: docs/admin.md, "Several rails").
XRC_MPIRUN_ARGS="--mca btl_xrc_verbose 10 --mca btl_xrc_flags send,put,inplace" \
    xrc_run "$WORKDIR/put" nodeA:1,nodeB:1 self,vader,xrc "$MPI_DIR/allpairs" --max-size 4194304 ||
    die "allpairs over RPUT on two rails failed"
expect_line "$WORKDIR/put" '^allpairs: OK .*errors=0' "allpairs 2x1 to 4 MiB over RPUT, two rails"
w1=$(counter_sum "$WORKDIR/put" rdma_bytes_written --port 1) w2=$(counter_sum "$WORKDIR/put" rdma_bytes_written --port 2)
# 54544 / 100000 of rail 1's share, give or take what rounding to whole fragments moves
awk -v a="$w1" -v b="$w2" 'BEGIN { exit !(a > 0 && b / a > 0.45 && b / a < 0.65) }' ||
    die "RDMA writes not split by rate: rail 1 $w1 bytes, rail 2 $w2 bytes"
info "RPUT bytes written: rail 1 $w1, rail 2 $w2 (ratio $(awk -v a="$w1" -v b="$w2" 'BEGIN { printf "%.3f", b / a }'), rates 0.545)"

# 2. Collectives and one-sided over both rails.
osc_rdma_setup
colls_and_onesided nodeA:2,nodeB:2 ", two rails"

# 3. A rail down at start-up on one node.
sc exec nodeB "$SIMHCA_CTL" fault port-down --port 2 >/dev/null || die "port-down failed"
XRC_MPIRUN_ARGS="--mca btl_xrc_verbose 10 --mca btl_xrc_connect_timeout 10" \
    xrc_run "$WORKDIR/down" "$(hosts_spec 4 2)" self,vader,xrc "$MPI_DIR/allpairs" --expect "$(hosts_spec 4 2)" ||
    die "allpairs 4x2 with nodeB's rail 2 down failed"
expect_line "$WORKDIR/down" '^allpairs: OK .*errors=0' "allpairs 4x2, nodeB's rail 2 down at start-up"
[ "$(counter_nonzero "$WORKDIR/down" connection_failures)" = 0 ] || die "a connection failed with nodeB's rail 2 down"
[ "$(grep -c 'using simhca0:2 ' "$WORKDIR/down")" = 6 ] || die "expected rail 2 on the 6 processes outside nodeB"
info "rail 2 used by the 6 processes outside nodeB; no connection failed; rail 2 moved bytes in $(rail_bytes "$WORKDIR/down" 2)"
sc exec nodeB "$SIMHCA_CTL" fault port-up --port 2 >/dev/null || die "port-up failed"

# 4. A flap on rail 2 leaves rail 1 alone.
rm -f "$WORKDIR/stop"
(XRC_MPIRUN_ARGS="--mca btl_xrc_verbose 10" xrc_run "$WORKDIR/flap" nodeA:2,nodeB:2 self,vader,xrc "$MPI_DIR/steady" 3 \
    "$WORKDIR/stop") &
job=$!
wait_for_line "$WORKDIR/flap.raw" '^steady: traffic' 60 || { kill $job; wait $job; die "no traffic"; }
sc exec nodeB "$SIMHCA_CTL" fault port-down --port 2 >/dev/null || die "port-down failed"
sleep 0.5
sc exec nodeB "$SIMHCA_CTL" fault port-up --port 2 >/dev/null || die "port-up failed"
sleep 1
touch "$WORKDIR/stop"
wait $job || die "the job did not ride through rail 2's flap"
expect_line "$WORKDIR/flap" '^steady: OK .*errors=0' "steady 2x2 through a flap of nodeB's rail 2"
grep -q 'btl:xrc: nodeB: simhca0:2: the port went down' "$WORKDIR/flap" || die "no message naming rail 2 going down"
grep -q 'simhca0:1: the port went down' "$WORKDIR/flap" && die "rail 1 was reported down"
[ "$(counter_nonzero "$WORKDIR/flap" port_downs --port 1)" = 0 ] || die "rail 1's module held sends"
[ "$(paste <(counter "$WORKDIR/flap" port_downs --port 2) <(counter "$WORKDIR/flap" port_ups --port 2) |
    grep -c '^1	1$')" = 2 ] ||
    die "nodeB's 2 rail-2 modules did not count one hold and one resume each"
info "rail 2 held and resumed on nodeB's ranks; rail 1 never held"
expect_no_objects
info "PASS"
