#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The device-free functions behave like rdma-core 44's: abi-dump runs every input range through the system
# library and ours and the outputs must be identical; then abi-dump --ours checks the clean failures and
# no-ops that only our library promises (compat 1.0 entry points, IBVERBS_PRIVATE_34 stubs, fork support).
. "${srcdir:-$(dirname "$0")}/abi-common.sh"
dump=${ABI_DUMP:-./abi-dump}
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

"$dump" "$SYSTEM_LIB" > "$tmp/sys" || { echo "FAIL: abi-dump on the system library"; exit 1; }
"$dump" "$OUR_LIB" > "$tmp/ours" || { echo "FAIL: abi-dump on our library"; exit 1; }
status=0
if diff -u "$tmp/sys" "$tmp/ours"; then
    echo "ok: $(wc -l < "$tmp/sys") lines of string/rate/copy/sysfs results identical to rdma-core"
else
    echo "FAIL: results differ from rdma-core (- system, + ours)"
    status=1
fi
"$dump" --ours "$OUR_LIB" || status=1
exit $status
