#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. What an xrc job (self,vader,xrc: vader carries on-node
# traffic) holds in each node's HCA while every pair is connected (simhca-ctl, per node), against the design:
#   XRC INI QPs on a node = P_node * (N-1)     (one per process and remote node)
#   XRC TGT QPs on a node = remote senders      (one per sending process of the other nodes), each with a
#                                                handle from every one of the node's P_node ranks
#   so exactly 2*P*(N-1) QPs per node when every node has P ranks;
#   SRQs on a node = 3 * P_node (three receive classes), one XRC domain; one UD QP per process (its connection
#   manager), no RC QP; nothing after the job.
# (hold exchanges a message between every pair of ranks, so every node talks to every other: on demand or eager,
# the node then holds what eager pre-wiring would.)
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 3 3
check_shape() {
    local hosts=$1 total=0 n=0 spec node p
    for spec in ${hosts//,/ }; do total=$((total + ${spec#*:})); n=$((n + 1)); done
    rm -f "$WORKDIR/release" "$WORKDIR/hold.out.raw"  # no stale "hold: connected" from the last shape
    HOLD_FILE="$WORKDIR/release" XRC_MPIRUN_ARGS="-x HOLD_FILE" \
        xrc_run "$WORKDIR/hold.out" "$hosts" self,vader,xrc "$MPI_DIR/hold" &
    local job=$!
    for _ in $(seq 600); do grep -q '^hold: connected' "$WORKDIR/hold.out.raw" 2>/dev/null && break; sleep 0.1; done
    grep -q '^hold: connected .*errors=0' "$WORKDIR/hold.out.raw" || { touch "$WORKDIR/release"; wait $job; die "$hosts: the job did not connect"; }
    for spec in ${hosts//,/ }; do
        node=${spec%:*}
        p=${spec#*:}
        sc exec "$node" "$SIMHCA_CTL" list --json >"$WORKDIR/$node.json" 2>&1
        read -r ini tgt handles other ud srqs xrcds < <(/usr/bin/python3 - "$WORKDIR/$node.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
qps = d.get("qp_list", [])
ini = [q for q in qps if q["type"] == "XRC_INI"]
tgt = [q for q in qps if q["type"] == "XRC_TGT"]
ud = [q for q in qps if q["type"] == "UD"]
print(len(ini), len(tgt), ",".join(map(str, sorted({q["handles"] for q in tgt}))) or "-",
      len(qps) - len(ini) - len(tgt) - len(ud), len(ud), len(d.get("srq_list", [])), d.get("xrcds"))
PY
)
        [ "$ini" = $((p * (n - 1))) ] && [ "$tgt" = $((total - p)) ] && [ "$handles" = "$p" ] && [ "$other" = 0 ] && [ "$ud" = "$p" ] &&
            [ "$srqs" = $((3 * p)) ] && [ "$xrcds" = 1 ] ||
            { touch "$WORKDIR/release"; wait $job; die "$hosts $node: INI=$ini (want $((p * (n - 1)))) TGT=$tgt (want $((total - p))) handles=$handles (want $p) UD=$ud (want $p) other=$other SRQs=$srqs XRCDs=$xrcds"; }
        info "$hosts $node (P=$p, N=$n): INI $ini = P*(N-1); TGT $tgt = one per remote sending process, $handles handle(s) each; $((ini + tgt)) XRC QPs (2*P*(N-1) = $((2 * p * (n - 1))) when all nodes have P ranks); $ud UD QPs; $srqs SRQs; 1 XRC domain"
    done
    touch "$WORKDIR/release"
    wait $job || die "$hosts: hold job failed"
}
check_shape nodeA:2,nodeB:2
check_shape nodeA:1,nodeB:2,nodeC:3
expect_no_objects
info "PASS"
