#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The README's source route on a fresh Debian 13 machine: in a `debootstrap --variant=minbase trixie` root with only
# debootstrap's apt source (a `deb` line, no `deb-src`), `scripts/install-deps && scripts/build` must set up and
# build everything (configure fetches Debian's openmpi source for the headers libopenmpi-dev lacks, which needs the
# deb-src entry install-deps adds), and install-deps must say what it changed. The root is scripts/debroot's cached
# fresh trixie root, used through an overlay (--ephemeral): every run starts from it as made. apt's downloads are
# kept in $DEBIAN_PACKAGE_CACHE/apt-archives-trixie-source-route. Slow (every package of install-deps, then a full
# build): not part of make check; run by `make -C tests/package source-route`. Needs root; expects BTL_XRC_SRCDIR.
set -u -o pipefail
. "$(dirname "$0")/leftovers.sh"
src=${BTL_XRC_SRCDIR:?BTL_XRC_SRCDIR is not set (make -C tests/package source-route)}
cache=${DEBIAN_PACKAGE_CACHE:-/var/cache/btl-xrc/debian-package}
start=$SECONDS
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (debootstrap, chroot and mounts for the Debian root)"; exit 77; }
die() { echo "FAIL: $*"; exit 1; }
note() { echo "debian13-source-route: $*"; }
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || die "$src is not a git checkout"

tmp=$(mktemp -d /var/tmp/btl-xrc-source-route.XXXXXX)
trap 'rm -rf --one-file-system "$tmp"' EXIT
trap 'exit 1' INT TERM
# the checkout's files as a commit would hold them, nothing built
mkdir "$tmp/src"
(cd "$src" && git ls-files -z -co --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf -) | tar -xf - -C "$tmp/src" || die "copying the checkout"
root=$("$tmp/src/scripts/debroot" ensure trixie) || die "the fresh trixie root (scripts/debroot)"
archives=$cache/apt-archives-trixie-source-route
mkdir -p "$archives/partial"

"$tmp/src/scripts/debroot" run --ephemeral --bind "$tmp" --bind "$archives" "$root" \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 bash -c '
    tmp=$1 archives=$2
    # the apt sources of a fresh debootstrap root: one deb line, no deb-src, no source index; and no policy-rc.d
    # (scripts/debroot adds one to its roots): install-deps must keep the services it installs from starting itself
    echo "deb http://deb.debian.org/debian trixie main" >/etc/apt/sources.list
    rm -f /etc/apt/sources.list.d/* /var/lib/apt/lists/*Sources* /usr/sbin/policy-rc.d
    echo "Dir::Cache::Archives \"$archives/\";" >/etc/apt/apt.conf.d/90source-route-cache
    cd "$tmp/src" || exit 1
    scripts/install-deps >"$tmp/install-deps.out" 2>&1 || { tail -20 "$tmp/install-deps.out"; echo "FAIL: scripts/install-deps"; exit 1; }
    cat "$tmp/install-deps.out"
    grep -q "CHANGED apt.s sources: added /etc/apt/sources.list.d/btl-xrc-deb-src.sources" "$tmp/install-deps.out" ||
        { echo "FAIL: install-deps did not say that it added a deb-src entry"; exit 1; }
    echo "PASS: scripts/install-deps (and it said what it changed)"
    [ ! -e /usr/sbin/policy-rc.d ] || { echo "FAIL: install-deps left its /usr/sbin/policy-rc.d behind"; exit 1; }
    nice scripts/build >"$tmp/build.out" 2>&1 || { tail -40 "$tmp/build.out"; tail -30 build/configure.out; echo "FAIL: scripts/build"; exit 1; }
    tail -1 "$tmp/build.out"
    sed -n "/missing headers/p" build/configure.out
    if [ -f build/components/mca_btl_xrc.so ] && ldd build/components/mca_btl_xrc.so | grep -q "libopen-pal.so.80"; then
        echo "PASS: scripts/build: build/components/mca_btl_xrc.so for Open MPI 5.0 (libopen-pal.so.80)"
    else
        echo "FAIL: no build/components/mca_btl_xrc.so linked to libopen-pal.so.80"; exit 1
    fi
    # no daemon of the installed packages (munge, slurmctld, slurmd) or of the build may outlive the route
    . "$tmp/src/tests/package/leftovers.sh" || exit 1
    left=$(processes_in_this_root)
    [ -z "$left" ] || { echo "FAIL: processes left in the root:$left"; exit 1; }
    echo "PASS: no process left in the root"
' source-route "$tmp" "$archives"
status=$?
left=$(mounts_left_on_host "$tmp")
if [ -n "$left" ]; then
    echo "FAIL: mounts left on the host: $left"
    status=1
else
    echo "PASS: no mount left on the host"
fi
note "took $((SECONDS - start)) s"
exit $status
