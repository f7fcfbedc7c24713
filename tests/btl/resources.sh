#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# What the job holds in the HCA while it runs, counted by simhca-ctl, on one node with P ranks:
#  - self,xrc (xrc carries on-node traffic, through the HCA's loopback): per rank one loopback INI QP and the
#    TGT QP it reaches every local SRQ through (its own handle only), one SRQ per receive class, one shared
#    XRC domain;
#  - self,vader,xrc (vader carries on-node traffic): no XRC QP at all, only the SRQs and the domain;
#  - in both, per rank the connection manager's UD QP (connections to other nodes are made through it);
#  and nothing once the job is over.
. "$(dirname "$0")/common.sh"
start_daemon
check() {
    local P=$1 btls=$2 want_qps=$3
    rm -f "$work/release" "$work/out"  # a stale "hold: connected" from the last job would end the wait at once
    HOLD_FILE="$work/release" xrun "$work/out" -x HOLD_FILE -np $P --mca btl $btls "$MPI/hold" &
    job=$!
    for _ in $(seq 300); do grep -q '^hold: connected' "$work/out" 2>/dev/null && break; sleep 0.1; done
    "$SIMHCA_CTL" list --json >"$work/list.json" 2>&1
    touch "$work/release"
    wait $job
    status=$?
    counts=$(/usr/bin/python3 - "$work/list.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
qps = d.get("qp_list", [])
ini = [q for q in qps if q["type"] == "XRC_INI"]
tgt = [q for q in qps if q["type"] == "XRC_TGT"]
ud = [q for q in qps if q["type"] == "UD"]
other = [q for q in qps if q["type"] not in ("XRC_INI", "XRC_TGT", "UD")]
handles = sorted({q["handles"] for q in tgt})
print(len(ini), len(tgt), ",".join(map(str, handles)) or "-", len(ud), len(other), len(d.get("srq_list", [])),
      d.get("xrcds"), all(q["state"] == "RTS" for q in ini + tgt + ud))
PY
)
    read -r ini tgt handles ud other srqs xrcds rts <<<"$counts"
    local want_handles=1
    [ "$want_qps" = 0 ] && want_handles="-"
    if [ $status -eq 0 ] && [ "$ini" = "$want_qps" ] && [ "$tgt" = "$want_qps" ] && [ "$handles" = "$want_handles" ] &&
       [ "$ud" = "$P" ] && [ "$other" = 0 ] && [ "$srqs" = $((3 * P)) ] && [ "$xrcds" = 1 ] && [ "$rts" = True ]; then
        pass "P=$P $btls: $ini INI QPs, $tgt TGT QPs (handles: ${handles:-none}), $ud UD QPs, $srqs SRQs, $xrcds XRC domain, all RTS"
    else
        fail "P=$P $btls (exit $status): INI=$ini TGT=$tgt handles=$handles UD=$ud other=$other SRQs=$srqs XRCDs=$xrcds RTS=$rts"
        head -c 2000 "$work/list.json"; echo
    fi
    expect_no_objects "P=$P $btls"
}
check 1 self,xrc 0  # a single rank has no peer: nothing to connect
for P in 2 3; do check $P self,xrc $P; done
check 3 self,vader,xrc 0
finish
