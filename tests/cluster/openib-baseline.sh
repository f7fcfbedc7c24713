#!/bin/bash
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
OPENIB=(--mca btl_openib_allow_ib 1 --mca btl_openib_warn_no_device_params_found 0)
run_allpairs 2 2 self,vader,openib "${OPENIB[@]}"
run_allpairs 4 2 self,vader,openib "${OPENIB[@]}"
sc down || fail "simcluster down failed"
assert_gone
info "PASS"
