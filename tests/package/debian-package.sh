#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The Debian packages as an administrator gets them: built from this checkout with dpkg-buildpackage in a clean
# Debian 12 root holding only the Build-Depends (debian/control), checked by lintian, then installed with apt into
# a fresh Debian 12 root (apt resolves their dependencies), where a plain mpirun finds the component and runs jobs
# on the software HCA of the simhca package, and `apt-get purge` must leave no file behind (root-inside.sh).
# Both roots are scripts/debroot's cached roots, used through an overlay (--ephemeral), so each run starts from a
# fresh root and the cache stays as made; apt's downloads are kept (DEBIAN_PACKAGE_CACHE) and the .debs are reused
# while the tree they were built from is unchanged. Needs root; expects BTL_XRC_SRCDIR (tests/package/Makefile.am).
# --build-only: build (or find) the packages and stop, so that a later run finds them built.
# DEBIAN_PACKAGE_DEBS=DIR: take the packages (and the allpairs program compiled against the same Open MPI) from DIR
# instead of building them (scripts/check-debian13 builds the Debian 13 ones once, for its leg and for this cycle).
set -u -o pipefail
. "$(dirname "$0")/leftovers.sh"
build_only=0
[ "${1:-}" = --build-only ] && build_only=1
src=${BTL_XRC_SRCDIR:?BTL_XRC_SRCDIR is not set (run through make check)}
suite=${DEBIAN_PACKAGE_SUITE:-bookworm}
cache=${DEBIAN_PACKAGE_CACHE:-/var/cache/btl-xrc/debian-package}
start=$SECONDS

[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (debootstrap, chroot and mounts for the Debian roots)"; exit 77; }
die() { echo "FAIL: $*"; exit 1; }
note() { echo "debian-package: $*"; }
for tool in debootstrap lintian git; do
    command -v "$tool" >/dev/null || die "$tool not found: install the Debian package $tool (scripts/install-deps)"
done
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || die "$src is not a git checkout (the package is built from its files)"

tmp=$(mktemp -d /var/tmp/btl-xrc-debian-package.XXXXXX)
trap 'rm -rf --one-file-system "$tmp"' EXIT
trap 'exit 1' INT TERM

# The checkout's files (tracked and untracked, not ignored: what a commit of it would hold) and nothing built.
mkdir "$tmp/src" "$tmp/debs"
(cd "$src" && git ls-files -z -co --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf -) | tar -xf - -C "$tmp/src" || die "copying the checkout"
debroot=$tmp/src/scripts/debroot   # the copy: the checkout may change while this runs

# The build root: build-essential and the first alternative of every Build-Depends entry, without versions
# (debhelper-compat is provided by debhelper). A changed list makes a new root (scripts/debroot's key).
build_deps() {
    sed -n '/^Build-Depends:/,/^[^ ]/p' "$tmp/src/debian/control" | sed '1s/^Build-Depends://; /^[A-Za-z-]*:/d' |
        tr ',' '\n' | sed 's/|.*//; s/([^)]*)//; s/\[[^]]*\]//; s/<[^>]*>//; s/[[:space:]]//g' | grep -v '^$' |
        sed 's/^debhelper-compat$/debhelper/'
}
# With DEBIAN_PACKAGE_CCACHE=DIR (debian13-package.sh sets it) the build root also holds ccache, and the package
# build compiles through it into DIR on the host, so that a rebuild after a change of the tree recompiles only what
# changed. The packages are the same with a cold, a warm or no cache: ccache only saves time.
ccache_dir=${DEBIAN_PACKAGE_CCACHE:-}
[ -z "$ccache_dir" ] || mkdir -p "$ccache_dir" || die "cannot make the compiler cache $ccache_dir"
given_debs=${DEBIAN_PACKAGE_DEBS:-}
if [ -z "$given_debs" ]; then
    # shellcheck disable=SC2046
    buildroot=$("$debroot" ensure "$suite" build-essential $(build_deps) ${ccache_dir:+ccache}) ||
        die "the $suite build root (scripts/debroot)"
fi
testroot=$("$debroot" ensure "$suite") || die "the fresh $suite root (scripts/debroot)"
note "roots ready after $((SECONDS - start)) s"

if [ -n "$given_debs" ]; then
    for f in "$given_debs"/btl-xrc_*.deb "$given_debs"/simhca_*.deb "$given_debs/allpairs"; do
        [ -f "$f" ] || die "DEBIAN_PACKAGE_DEBS=$given_debs: no $(basename "$f")"
    done
    cp -a "$given_debs/." "$tmp/debs/"
    note "the packages of $given_debs: $(cd "$tmp/debs" && echo ./*.deb)"
else
    # Build (or reuse what was built from the same files in the same build root; this test's own files are not
    # part of what is built).
    key=$( (cd "$tmp/src" && find . -type f ! -path './tests/package/*' -print0 | sort -z | xargs -0 sha256sum
            echo "$buildroot") | sha256sum | cut -c1-16)
    built=$cache/$suite-$key
    mkdir -p "$cache"
    exec 9>"$cache/$suite.lock"   # one run at a time builds, replaces or copies this suite's packages
    flock -w 3600 9 || die "could not lock $cache/$suite.lock"
    if [ -f "$built/complete" ]; then
        note "reusing the packages built from the same tree ($built)"
    else
        t0=$SECONDS
        # Through ccache, the tree is built at the same path in every run (in the overlay, gone with it): the
        # compiler's command lines, which name the build directory, then stay the same from run to run, as ccache's
        # keys need.
        "$debroot" run --ephemeral --bind "$tmp" ${ccache_dir:+--bind "$ccache_dir"} "$buildroot" sh -c '
            if [ -n "$2" ]; then
                mkdir /build && cp -a "$1/src" /build/btl-xrc && cd /build/btl-xrc || exit 1
                export PATH="/usr/lib/ccache:$PATH" CCACHE_DIR="$2" CCACHE_MAXSIZE=2G
                ccache --zero-stats >/dev/null
            else
                cd "$1/src" || exit 1
            fi
            DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" nice -n 10 dpkg-buildpackage -b -us -uc \
                >"$1/build.log" 2>&1 || { tail -40 "$1/build.log"; exit 1; }
            [ -z "$2" ] || ccache --show-stats >"$1/ccache.stats" 2>&1
            mv ../*.deb ../*.changes ../*.buildinfo "$1/debs/" &&
            # the job of the test, compiled against the same Open MPI as the packages
            mpicc -O2 -o "$1/debs/allpairs" tests/mpi/allpairs.c tests/mpi/xrc_pvars.c' sh "$tmp" "$ccache_dir" ||
            die "dpkg-buildpackage -b in the $suite build root (log above)"
        rm -rf --one-file-system "$cache/$suite"-*
        mkdir -p "$built"
        cp -a "$tmp/debs/." "$built/"
        touch "$built/complete"
        note "built $(cd "$built" && ls ./*.deb | tr '\n' ' ')in $((SECONDS - t0)) s"
        [ -z "$ccache_dir" ] ||
            note "compiler cache $ccache_dir: $(grep -m1 -E '^ *Hits:' "$tmp/ccache.stats" | tr -s ' ' | sed 's/^ //')"
    fi
    [ $build_only = 0 ] || { note "packages ready after $((SECONDS - start)) s"; exit 0; }
    cp -a "$built/." "$tmp/debs/"
    exec 9>&-
fi

# lintian: errors fail, warnings are listed.
lintian --fail-on error "$tmp"/debs/btl-xrc_*.deb "$tmp"/debs/simhca_*.deb \
    >"$tmp/lintian.out" 2>&1
lintian_status=$?
grep -v '^running with root privileges' "$tmp/lintian.out" | sed 's/^/lintian: /'
[ $lintian_status = 0 ] || die "lintian reports errors"

# Install, run, purge in a fresh root, with a clean environment (a plain mpirun: nothing selects the component).
archives=$cache/apt-archives-$suite
mkdir -p "$archives/partial"
"$debroot" run --ephemeral --bind "$tmp" --bind "$archives" "$testroot" \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    bash "$tmp/src/tests/package/root-inside.sh" "$tmp" "$archives"
status=$?
left=$(mounts_left_on_host "$tmp")
if [ -n "$left" ]; then
    echo "FAIL: mounts left on the host: $left"
    status=1
else
    echo "ok: no mount left on the host"
fi
note "took $((SECONDS - start)) s"
exit $status
