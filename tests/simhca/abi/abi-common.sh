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
