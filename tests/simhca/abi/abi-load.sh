#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Debian's prebuilt users of libibverbs load with ours under BIND_NOW (every symbol@version resolved at load
# time, as their DT_FLAGS demand): ibverbs-utils and perftest binaries, the rdma-core providers (whose
# constructors call verbs_register_driver_34), pyverbs with its provider modules, and Open MPI's openib BTL.
# "Loads" = no "symbol lookup error" / "version ... not found", and the libibverbs.so.1 used is ours.
. "${srcdir:-$(dirname "$0")}/abi-common.sh"
PY=/usr/bin/python3   # Debian's interpreter: pyverbs is installed for it, not for a pyenv/venv python
export LD_BIND_NOW=1
# Never reach a daemon someone runs on the default instance: this test is about loading only.
export SIMHCA_INSTANCE="abi-load.$$"
export LD_LIBRARY_PATH="$OUR_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
checked=0
fail() { echo "FAIL: $*"; status=1; }
lookup_error() { grep -E "symbol lookup error|version \`IBVERBS[^']*' not found|undefined symbol" "$1"; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

# 1. Static resolution of every binary of ibverbs-utils and perftest: ldd -r performs all relocations.
for pkg in ibverbs-utils perftest; do
    for bin in $(dpkg -L "$pkg" 2>/dev/null | grep '^/usr/bin/'); do
        [ -x "$bin" ] || continue
        ldd "$bin" 2>/dev/null | grep -q libibverbs || continue   # scripts, or not a verbs user
        ldd -r "$bin" > "$tmp/ldd" 2>&1
        if ! grep -q "libibverbs.so.1 => $OUR_LIBDIR" "$tmp/ldd" &&
           ! grep -q "libibverbs.so.1 => $OUR_LIB" "$tmp/ldd"; then
            fail "$bin does not pick our library: $(grep libibverbs "$tmp/ldd")"
        fi
        if grep -E "not defined|not found|undefined symbol" "$tmp/ldd" | grep -iq "verbs\|IBVERBS"; then
            fail "$bin: $(grep -E 'not defined|not found|undefined symbol' "$tmp/ldd" | head -3)"
        fi
        checked=$((checked + 1))
    done
done
[ $checked -gt 0 ] || fail "no ibverbs-utils/perftest binaries found (apt-get install ibverbs-utils perftest)"

# 2. Really start two of them (no daemon needed: they must get past the loader, whatever they print next).
for cmd in "ibv_devices" "ib_send_bw --help"; do
    timeout 20 $cmd > "$tmp/out" 2>&1 < /dev/null
    rc=$?
    [ $rc -eq 124 ] && fail "'$cmd' hung (timeout 20 s)"
    lookup_error "$tmp/out" > /dev/null && fail "'$cmd': $(lookup_error "$tmp/out" | head -2)"
    checked=$((checked + 1))
done

# 3. Providers and pyverbs, dlopen'ed RTLD_NOW in one Python process that then checks which libibverbs it got.
$PY - "$OUR_LIB" > "$tmp/py" 2>&1 <<'PYEOF'
import ctypes, glob, os, sys
ours = sys.argv[1]
bad = 0
libs = sorted(glob.glob('/usr/lib/x86_64-linux-gnu/libibverbs/*.so')) + \
       [p for p in ('/usr/lib/x86_64-linux-gnu/libmlx5.so.1', '/usr/lib/x86_64-linux-gnu/libmlx4.so.1',
                    '/usr/lib/x86_64-linux-gnu/libefa.so.1') if glob.glob(p)]
for lib in libs:
    try:
        ctypes.CDLL(lib, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError as e:
        print('FAIL: provider', lib, e); bad += 1
for mod in ('pyverbs.device', 'pyverbs.qp', 'pyverbs.cq', 'pyverbs.srq', 'pyverbs.xrcd',
            'pyverbs.providers.mlx5.mlx5dv', 'pyverbs.providers.efa.efadv'):
    try:
        __import__(mod)
    except ImportError as e:
        print('FAIL: import', mod, e); bad += 1
maps = open('/proc/self/maps').read()
used = {l.split()[-1] for l in maps.splitlines() if 'libibverbs.so' in l}
if used != {ours}:
    print('FAIL: libibverbs mapped from', used, 'expected only', ours); bad += 1
print('python: %d providers + pyverbs modules loaded' % len(libs))
sys.exit(1 if bad else 0)
PYEOF
[ $? -eq 0 ] || status=1
cat "$tmp/py"
checked=$((checked + 1))

# 4. Open MPI's openib BTL (links libibverbs): only its verbs relocations matter here.
for so in /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_btl_openib.so; do
    [ -e "$so" ] || continue
    ldd -r "$so" 2>&1 | grep -E "not defined|not found" | grep -i "verbs" > "$tmp/ompi"
    [ -s "$tmp/ompi" ] && fail "$so: $(head -3 "$tmp/ompi")"
    checked=$((checked + 1))
done

[ $status -eq 0 ] && echo "ok: $checked loader checks passed with $OUR_LIB under LD_BIND_NOW"
exit $status
