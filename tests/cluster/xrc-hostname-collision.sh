#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. Two nodes whose host names hash to the same node id
# (FNV-1a with the top bit set, as btl_xrc_modex.cc's my_node_id computes it when the launcher gives no PMIx node
# id) are still two nodes: traffic between them is correct, nothing is left on the HCAs, and xrc-status on each node
# lists its own processes only.
#
# The two names were found by brute force over node0, node1, ... (a birthday search on the 31 free bits):
#   def node_id(name):
#       h = 2166136261
#       for b in name.encode(): h = ((h ^ b) * 16777619) & 0xffffffff
#       return h | 0x80000000
#   seen = {}
#   for i in itertools.count():
#       n = "node%d" % i; k = node_id(n)
#       if k in seen: print(seen[k], n, hex(k)); break
#       seen[k] = n
# -> node288824 node678140 0x936d3391
#
# mpirun's launchers (ORTE, PRRTE) always give a node id, so the hash would never be used here: the jobs set
# btl_xrc_node_id hostname, which takes the hash of the host name whatever the launcher says (the same code path
# as a launcher without node ids). The test checks that the hash path was taken (both nodes' processes report the
# colliding id).
#
# Jobs: allpairs 2x2 on the colliding pair, eager (every node connected during MPI_Init, the default up to 16
# nodes); then on demand with a third node (nodeC, its own name) and 1+2+2 ranks: rank 3 on nodeC wants rank 0
# (node288824) and its spread guess of the owner is rank 1, on node678140, which carries the same node id: the
# owner must be chosen by HCA port, or the TGT QP would be made on the wrong node. Then a held job on the pair for
# xrc-status.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
[ -x "$XRC_STATUS" ] || die "xrc-status is not built at $XRC_STATUS"

H1=node288824 H2=node678140
COLLIDING_ID=$((0x936d3391))
up_cluster 3 2 --hostnames "$H1,$H2,nodeC"
[ "$(sc exec nodeA hostname)" = "$H1" ] && [ "$(sc exec nodeB hostname)" = "$H2" ] ||
    die "the nodes do not carry the chosen host names"
BY_HASH="--mca btl_xrc_node_id hostname"

pair=$H1:2,$H2:2
XRC_MPIRUN_ARGS="$BY_HASH" xrc_run "$WORKDIR/out" "$pair" self,vader,xrc "$MPI_DIR/allpairs" --expect "$pair" ||
    die "allpairs on $pair (eager) failed"
expect_line "$WORKDIR/out" '^allpairs: OK .*errors=0' "allpairs $pair (eager)"
# On demand to 256 KiB (the eager, send and RDMA paths all taken: the routing is the point), the pair's ranks
# among them.
three=$H1:1,$H2:2,nodeC:2
XRC_MPIRUN_ARGS="$BY_HASH --mca btl_xrc_connect on-demand" \
    xrc_run "$WORKDIR/out" "$three" self,vader,xrc "$MPI_DIR/allpairs" --expect "$three" --max-size 262144 ||
    die "allpairs on $three (on-demand) failed"
expect_line "$WORKDIR/out" '^allpairs: OK .*errors=0' "allpairs $three (on-demand)"

# A held job on the pair: each node's xrc-status lists exactly its own two ranks, with the colliding id, and what
# its HCA holds.
rm -f "$WORKDIR/release"
HOLD_FILE="$WORKDIR/release" XRC_MPIRUN_ARGS="$BY_HASH -x HOLD_FILE" \
    xrc_run "$WORKDIR/hold.out" "$pair" self,vader,xrc "$MPI_DIR/hold" &
JOB=$!
wait_for_line "$WORKDIR/hold.out.raw" '^hold: connected .*errors=0' 60 ||
    { touch "$WORKDIR/release"; wait $JOB; die "the held job did not connect: $(cat "$WORKDIR/hold.out.raw")"; }
for node in nodeA nodeB; do
    expect_status_matches_hca "$node"
    case $node in nodeA) host=$H1 ranks="0 1" ;; nodeB) host=$H2 ranks="2 3" ;; esac
    /usr/bin/python3 - "$WORKDIR/$node.status.json" "$host" "$ranks" "$COLLIDING_ID" <<'PY' ||
import json, sys
status, host, ranks, node_id = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3].split(), int(sys.argv[4])
procs = [p for j in status["jobs"] for p in j["processes"]]
seen = sorted(str(p["rank"]) for p in procs)
bad = [p for p in procs if p["host"] != host or p["node"] != node_id]
if seen != sorted(ranks) or bad:
    sys.exit("ranks %s (expected %s), wrong host or node id: %s" % (seen, ranks, bad))
PY
        die "$node: xrc-status does not list only its own processes with the colliding node id"
    info "$node ($host): xrc-status lists ranks $ranks only, node id $COLLIDING_ID"
done
touch "$WORKDIR/release"
wait $JOB || die "the held job failed"
expect_no_objects
info "PASS"
