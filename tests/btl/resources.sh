#!/bin/bash
# What the job holds in the HCA while it runs, counted by simhca-ctl: on one node with P ranks, exactly one XRC
# INI QP per rank (toward the one node), one TGT QP per sending rank with a handle from every local rank,
# one SRQ per receive class per rank, one shared XRC domain; and nothing once the job is over.
. "$(dirname "$0")/common.sh"
start_daemon
for P in 1 2 3; do
    rm -f "$work/release"
    HOLD_FILE="$work/release" xrun "$work/out" -x HOLD_FILE -np $P --mca btl self,xrc "$MPI/hold" &
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
other = [q for q in qps if q["type"] not in ("XRC_INI", "XRC_TGT")]
handles = sorted({q["handles"] for q in tgt})
print(len(ini), len(tgt), ",".join(map(str, handles)), len(other), len(d.get("srq_list", [])), d.get("xrcds"),
      all(q["state"] == "RTS" for q in ini + tgt))
PY
)
    read -r ini tgt handles other srqs xrcds rts <<<"$counts"
    if [ $status -eq 0 ] && [ "$ini" = "$P" ] && [ "$tgt" = "$P" ] && [ "$handles" = "$P" ] && [ "$other" = 0 ] &&
       [ "$srqs" = $((3 * P)) ] && [ "$xrcds" = 1 ] && [ "$rts" = True ]; then
        pass "P=$P: $ini INI QPs, $tgt TGT QPs with $handles handles each, $srqs SRQs, $xrcds XRC domain, all RTS"
    else
        fail "P=$P (exit $status): INI=$ini TGT=$tgt handles=$handles other=$other SRQs=$srqs XRCDs=$xrcds RTS=$rts"
        head -c 2000 "$work/list.json"; echo
    fi
    expect_no_objects "P=$P"
done
finish
