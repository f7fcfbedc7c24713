#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Our librdmacm.so.1 (src/simhca/rdmacm) exports exactly rdma-core 44's: every name@version with the same
# kind, the same version nodes (RDMACM_1.0 <- 1.1 <- 1.2 <- 1.3) and parents, nothing unversioned; and
# pyverbs' cmid module (linked BIND_NOW against the system library) loads with ours and maps ours.
. "${srcdir:-$(dirname "$0")}/abi-common.sh"
SYSTEM_CM=${SYSTEM_RDMACM:-/usr/lib/x86_64-linux-gnu/librdmacm.so.1}
OUR_CM=$OUR_LIBDIR/librdmacm.so.1
[ -e "$OUR_CM" ] || { echo "SKIP: our librdmacm is not built ($OUR_CM missing)"; exit 77; }
[ -e "$SYSTEM_CM" ] || { echo "SKIP: no system librdmacm to compare with (install librdmacm1)"; exit 77; }
OUR_CM=$(readlink -f "$OUR_CM")
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

status=0
compare_exports "$SYSTEM_CM" "$OUR_CM" RDMACM_1 "$tmp" || status=1
# Its own dependency must be our libibverbs (same directory), never the system one.
if ! LD_LIBRARY_PATH=$OUR_LIBDIR ldd "$OUR_CM" | grep -q "libibverbs.so.1 => $OUR_LIBDIR"; then
    echo "FAIL: our librdmacm does not resolve libibverbs.so.1 to ours:"
    LD_LIBRARY_PATH=$OUR_LIBDIR ldd "$OUR_CM"
    status=1
fi
if /usr/bin/python3 -c 'import pyverbs' 2> /dev/null; then
    if ! LD_BIND_NOW=1 LD_LIBRARY_PATH=$OUR_LIBDIR /usr/bin/python3 -c '
import sys
import pyverbs.cmid
maps = open("/proc/self/maps").read()
sys.exit(0 if sys.argv[1] in maps and "/usr/lib/x86_64-linux-gnu/librdmacm" not in maps else 1)' "$OUR_CM"; then
        echo "FAIL: pyverbs.cmid does not load with our librdmacm under LD_BIND_NOW"
        status=1
    fi
else
    echo "note: pyverbs not installed, load check skipped"
fi
if [ $status -eq 0 ]; then
    echo "ok: $(wc -l < "$tmp/sys") dynamic symbols identical, $(cut -d" " -f1 "$tmp/sys.nodes" | sort -u | wc -l) version nodes; pyverbs.cmid loads ours"
fi
exit $status
