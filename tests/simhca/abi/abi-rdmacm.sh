#!/bin/sh
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

exports() {
    objdump -T "$1" | awk '$0 !~ /\*UND\*/ && NF >= 7 && $2 ~ /^[gwu]/ { print $NF, $(NF-1), $3 }' | sort
}
nodes() {
    readelf -V "$1" | awk '/Version definition/ {on=1; next} /Version needs/ {on=0}
        on && /Name:/ { name = $NF; if (/BASE/) name = "BASE"; print name, "-" }
        on && /Parent 1:/ { print name, $NF }' | sort -u
}

status=0
exports "$SYSTEM_CM" > "$tmp/sys"
exports "$OUR_CM" > "$tmp/ours"
if ! diff -u "$tmp/sys" "$tmp/ours" > "$tmp/diff"; then
    echo "FAIL: exported symbols differ (- system, + ours):"
    grep '^[-+][^-+]' "$tmp/diff"
    status=1
fi
nodes "$SYSTEM_CM" | grep -v '^BASE' > "$tmp/sys.nodes"
nodes "$OUR_CM" | grep -v '^BASE' > "$tmp/ours.nodes"
if ! diff -u "$tmp/sys.nodes" "$tmp/ours.nodes" > "$tmp/ndiff"; then
    echo "FAIL: version nodes or their parents differ (- system, + ours):"
    grep '^[-+][^-+]' "$tmp/ndiff"
    status=1
fi
objdump -T "$OUR_CM" | awk '$0 !~ /\*UND\*/ && $2 ~ /^[gwu]/ && $0 !~ /RDMACM_1/' > "$tmp/leaks"
if [ -s "$tmp/leaks" ]; then
    echo "FAIL: unversioned exports (add to rdmacm/librdmacm.map or make them local):"
    cat "$tmp/leaks"
    status=1
fi
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
