#!/bin/sh
# Our libibverbs.so.1 exports exactly the system one's dynamic symbols: every name@version (with the same
# default "@@" / compat "@" marking and the same kind, function or object), the same version nodes with the
# same parents, and nothing else. Debian's binaries are BIND_NOW: one missing entry stops them loading.
. "${srcdir:-$(dirname "$0")}/abi-common.sh"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

# One line per defined, versioned dynamic symbol: "name version kind binding". objdump prints a compat
# (non-default) version in parentheses, which the comparison keeps as the marking.
exports() {
    objdump -T "$1" | awk '$0 !~ /\*UND\*/ && NF >= 7 && $2 ~ /^[gwu]/ {
        print $NF, $(NF-1), $3, $2 }' | sort
}
# Version nodes and their parents, from readelf -V: "node parent".
nodes() {
    readelf -V "$1" | awk '/Version definition/ {on=1; next} /Version needs/ {on=0}
        on && /Name:/ { name = $NF; if (/BASE/) name = "BASE"; print name, "-" }
        on && /Parent 1:/ { print name, $NF }' | sort -u
}

exports "$SYSTEM_LIB" > "$tmp/sys"
exports "$OUR_LIB" > "$tmp/ours"
nodes "$SYSTEM_LIB" | grep -v '^BASE' > "$tmp/sys.nodes"
nodes "$OUR_LIB" | grep -v '^BASE' > "$tmp/ours.nodes"

status=0
# Binding (global vs weak) does not matter to the dynamic linker; compare it separately, as a note.
cut -d' ' -f1-3 "$tmp/sys" > "$tmp/sys3"
cut -d' ' -f1-3 "$tmp/ours" > "$tmp/ours3"
if ! diff -u "$tmp/sys3" "$tmp/ours3" > "$tmp/diff"; then
    echo "FAIL: exported symbols differ (- system, + ours):"
    grep '^[-+][^-+]' "$tmp/diff"
    status=1
fi
if ! diff -u "$tmp/sys.nodes" "$tmp/ours.nodes" > "$tmp/ndiff"; then
    echo "FAIL: version nodes or their parents differ (- system, + ours):"
    grep '^[-+][^-+]' "$tmp/ndiff"
    status=1
fi
# Unversioned exports would be symbols leaking past the version script's "local: *".
objdump -T "$OUR_LIB" | awk '$0 !~ /\*UND\*/ && $2 ~ /^[gwu]/ && $0 !~ /IBVERBS/' > "$tmp/leaks"
if [ -s "$tmp/leaks" ]; then
    echo "FAIL: unversioned exports (add to the map or make them local):"
    cat "$tmp/leaks"
    status=1
fi
if ! diff -q "$tmp/sys" "$tmp/ours" > /dev/null; then
    weak=$(diff "$tmp/sys" "$tmp/ours" | awk '/^>/ && $5 == "w" { print $2 }' | tr '\n' ' ')
    [ -n "$weak" ] && echo "note: still weak fallbacks (abi/weak_fallbacks.cpp): $weak"
fi

total=$(wc -l < "$tmp/sys")
compat=$(grep -c ' (IBVERBS' "$tmp/sys")
if [ $status -eq 0 ]; then
    echo "ok: $total dynamic symbols identical ($compat compat), $(cut -d" " -f1 "$tmp/sys.nodes" | sort -u | wc -l) version nodes"
fi
exit $status
