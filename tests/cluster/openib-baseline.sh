#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise). Baseline competitor on the same fabric: Open MPI's own openib BTL on the
# software HCA (default SRQ receive queues), allpairs on 2 nodes x 2 ranks and 4 nodes x 2 ranks.
# Returns 77 (SKIP) with the reason while the software HCA (simhcad + its libibverbs) is absent or not working.
. "$(dirname "$0")/common.sh"
need_allpairs
# what simcluster itself will find (same rules: SIMHCAD / build tree / PATH, SIMHCA_LIBDIR / build tree)
sc_dir=$(dirname "$(readlink -f "$SIMCLUSTER")")
daemon=${SIMHCAD:-}
[ -n "$daemon" ] || { [ -x "$sc_dir/../simhca/simhcad" ] && daemon=$sc_dir/../simhca/simhcad; }
[ -n "$daemon" ] || daemon=$(command -v simhcad 2>/dev/null) || true
[ -n "$daemon" ] && [ -x "$daemon" ] || skip "software HCA daemon simhcad not built (src/simhca/simhcad; or set SIMHCAD)"
libdir=${SIMHCA_LIBDIR:-$sc_dir/../simhca/lib/.libs}
[ -e "$libdir/libibverbs.so.1" ] || skip "software HCA library not built ($libdir/libibverbs.so.1; or set SIMHCA_LIBDIR)"

sc up --nodes 4 --slots 2 >"$WORKDIR/up.out" 2>&1 || { cat "$WORKDIR/up.out"; skip "software HCA daemons did not start/become ready in the nodes (see above)"; }
cat "$WORKDIR/up.out"
grep -q 'simhcad not found' "$WORKDIR/up.out" && skip "simcluster did not find simhcad"
# is the device there for a verbs program in a node? (ibv_devinfo from ibverbs-utils, when installed)
if command -v ibv_devinfo >/dev/null; then
    sc run --on nodeB ibv_devinfo >"$WORKDIR/devinfo.out" 2>&1 || true
    grep -q 'simhca0' "$WORKDIR/devinfo.out" && grep -q 'PORT_ACTIVE' "$WORKDIR/devinfo.out" ||
        { cat "$WORKDIR/devinfo.out"; skip "software HCA not working yet: ibv_devinfo in a node shows no active simhca0"; }
fi
# can it move data between two nodes? (rdma-core's pingpongs, when installed: UD is what openib's UDCM
# connection manager uses, RC carries the data)
pingpong() { # tool port
    local out=$WORKDIR/$1
    sc exec nodeA timeout -k 2 12 "$1" -p "$2" -n 20 >"$out.server" 2>&1 </dev/null &
    local spid=$! i
    for ((i = 0; i < 50; i++)); do
        sc exec nodeA cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
            awk -v p=":$(printf %04X "$2")" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' && break
        sleep 0.1
    done
    sc exec nodeB timeout -k 2 8 "$1" -p "$2" -n 20 nodeA >"$out.client" 2>&1 </dev/null
    local crc=$?
    wait $spid
    local src=$?
    [ $crc = 0 ] && [ $src = 0 ] && return 0
    tail -n 3 "$out.server" "$out.client"
    return 1
}
for tool in ibv_ud_pingpong ibv_rc_pingpong; do
    command -v $tool >/dev/null || continue
    pingpong $tool $((18700 + RANDOM % 200)) ||
        skip "software HCA not working yet: $tool between nodeB and nodeA failed (see above)"
    info "$tool nodeB -> nodeA: ok"
done
OPENIB=(--mca btl_openib_allow_ib 1 --mca btl_openib_warn_no_device_params_found 0)
run_allpairs 2 2 self,vader,openib "${OPENIB[@]}"
run_allpairs 4 2 self,vader,openib "${OPENIB[@]}"
sc down || die "simcluster down failed"
assert_gone
info "PASS"
