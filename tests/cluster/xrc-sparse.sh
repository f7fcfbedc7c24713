#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. The pattern connections on demand are for: 16 nodes x 2
# ranks on a periodic ring whose neighbours are two ranks away (each rank talks to the ranks of the two
# neighbouring nodes only; verified payloads, eager and rendezvous sizes). While the job holds its connections,
# every node's HCA (simhca-ctl) must hold exactly what the pattern needs, not what pre-wiring every node would:
#   XRC INI QPs = P * 2        (each rank: one per neighbouring node)
#   XRC TGT QPs = P * 2        (one per sending process of the two neighbouring nodes), one handle each (only the
#                               rank that made it receives through it)
#   UD QPs      = P            (the connection managers)
# against 2*P*(N-1) = 60 XRC QPs per node for eager wiring; and nothing once the job is over.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
N=16 P=2
up_cluster $N $P
hosts=$(hosts_spec $N $P)
rm -f "$WORKDIR/release"
MPIRUN_TIMEOUT=240 HOLD_FILE="$WORKDIR/release" \
    XRC_MPIRUN_ARGS="-x HOLD_FILE --mca btl_xrc_connect on-demand" \
    xrc_run "$WORKDIR/out" "$hosts" self,vader,xrc "$MPI_DIR/ring" --stride $P &
job=$!
for _ in $(seq 1800); do
    [ "$(grep -c '^ring: rank .* ok ' "$WORKDIR/out.raw" 2>/dev/null)" = $((N * P)) ] && break
    kill -0 $job 2>/dev/null || break
    sleep 0.1
done
[ "$(grep -c '^ring: rank .* ok .*errors=0' "$WORKDIR/out.raw" 2>/dev/null)" = $((N * P)) ] ||
    { touch "$WORKDIR/release"; wait $job; die "not every rank finished its ring exchange"; }
for node in $SIMCLUSTER_NODES_LIST; do
    sc exec "$node" "$SIMHCA_CTL" list --json >"$WORKDIR/$node.json" 2>&1
    read -r ini tgt handles ud other < <(/usr/bin/python3 - "$WORKDIR/$node.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
qps = d.get("qp_list", [])
ini = [q for q in qps if q["type"] == "XRC_INI"]
tgt = [q for q in qps if q["type"] == "XRC_TGT"]
ud = [q for q in qps if q["type"] == "UD"]
print(len(ini), len(tgt), ",".join(map(str, sorted({q["handles"] for q in tgt}))) or "-", len(ud),
      len(qps) - len(ini) - len(tgt) - len(ud))
PY
)
    [ "$ini" = $((2 * P)) ] && [ "$tgt" = $((2 * P)) ] && [ "$handles" = 1 ] && [ "$ud" = $P ] && [ "$other" = 0 ] ||
        { touch "$WORKDIR/release"; wait $job; die "$node: INI=$ini TGT=$tgt handles=$handles UD=$ud other=$other (want $((2 * P)) $((2 * P)) 1 $P 0)"; }
done
info "every node: $((2 * P)) INI + $((2 * P)) TGT XRC QPs (one handle each) + $P UD QPs, against $((2 * P * (N - 1))) XRC QPs wired eagerly"
info "first exchange after MPI_Init (connections made on the way): $(grep -o 'first=[0-9.]*' "$WORKDIR/out.raw" | cut -d= -f2 | sort -n | awk '{a[NR]=$1} END {printf "min %s s, median %s s, max %s s", a[1], a[int((NR+1)/2)], a[NR]}')"
touch "$WORKDIR/release"
wait $job || die "the ring job failed"
expect_no_objects
info "PASS"
