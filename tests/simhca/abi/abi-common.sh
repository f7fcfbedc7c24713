# SPDX-License-Identifier: BSD-3-Clause
# Sourced by the ABI tests. Finds our library and the system one; exits 77 (SKIP) when ours is not built
# yet, so `make check` stays meaningful while the library is being written.
#   SIMHCA_LIBDIR  directory holding our libibverbs.so.1 (set by Makefile.am; default: the build tree)
SYSTEM_LIB=${SYSTEM_LIB:-/usr/lib/x86_64-linux-gnu/libibverbs.so.1}
OUR_LIBDIR=${SIMHCA_LIBDIR:-$(cd "$(dirname "$0")/../../.." && pwd)/src/simhca/lib/.libs}
OUR_LIB=$OUR_LIBDIR/libibverbs.so.1

if [ ! -e "$OUR_LIB" ]; then
    echo "SKIP: our library is not built ($OUR_LIB missing)"
    exit 77
fi
if [ ! -e "$SYSTEM_LIB" ]; then
    echo "SKIP: no system libibverbs to compare with ($SYSTEM_LIB; install libibverbs1)"
    exit 77
fi
OUR_LIB=$(readlink -f "$OUR_LIB")

# compare_exports SYSTEM OURS VERSION_PREFIX DIR: our library exports exactly the system one's versioned
# dynamic symbols (name, version with its default "@@" / compat "@" marking, kind), the same version nodes
# with the same parents, and nothing unversioned (a symbol leaking past the version script's "local: *").
# Prints a FAIL line and the difference for each mismatch; returns 1 if there was one. Leaves in DIR:
# sys / ours ("name version kind binding" per symbol) and sys.nodes / ours.nodes ("node parent").
# The binding (global or weak) does not matter to the dynamic linker and is not compared.
abi_exports() {
    objdump -T "$1" | awk '$0 !~ /\*UND\*/ && NF >= 7 && $2 ~ /^[gwu]/ {
        print $NF, $(NF-1), $3, $2 }' | sort
}
abi_nodes() {
    readelf -V "$1" | awk '/Version definition/ {on=1; next} /Version needs/ {on=0}
        on && /Name:/ { name = $NF; if (/BASE/) name = "BASE"; print name, "-" }
        on && /Parent 1:/ { print name, $NF }' | sort -u | grep -v '^BASE'
}
compare_exports() {
    _sys=$1 _ours=$2 _prefix=$3 _dir=$4 _st=0
    abi_exports "$_sys" > "$_dir/sys"
    abi_exports "$_ours" > "$_dir/ours"
    abi_nodes "$_sys" > "$_dir/sys.nodes"
    abi_nodes "$_ours" > "$_dir/ours.nodes"
    cut -d' ' -f1-3 "$_dir/sys" > "$_dir/sys3"
    cut -d' ' -f1-3 "$_dir/ours" > "$_dir/ours3"
    if ! diff -u "$_dir/sys3" "$_dir/ours3" > "$_dir/diff"; then
        echo "FAIL: exported symbols differ (- system, + ours):"
        grep '^[-+][^-+]' "$_dir/diff"
        _st=1
    fi
    if ! diff -u "$_dir/sys.nodes" "$_dir/ours.nodes" > "$_dir/ndiff"; then
        echo "FAIL: version nodes or their parents differ (- system, + ours):"
        grep '^[-+][^-+]' "$_dir/ndiff"
        _st=1
    fi
    objdump -T "$_ours" | awk -v p="$_prefix" '$0 !~ /\*UND\*/ && $2 ~ /^[gwu]/ && index($0, p) == 0' > "$_dir/leaks"
    if [ -s "$_dir/leaks" ]; then
        echo "FAIL: unversioned exports (add them to the version script or make them local):"
        cat "$_dir/leaks"
        _st=1
    fi
    return $_st
}
