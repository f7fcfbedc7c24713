#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Our libibverbs.so.1 exports exactly the system one's dynamic symbols: every name@version (with the same
# default "@@" / compat "@" marking and the same kind, function or object), the same version nodes with the
# same parents, and nothing else. Debian's binaries are BIND_NOW: one missing entry stops them loading.
. "${srcdir:-$(dirname "$0")}/abi-common.sh"
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

status=0
compare_exports "$SYSTEM_LIB" "$OUR_LIB" IBVERBS "$tmp" || status=1
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
