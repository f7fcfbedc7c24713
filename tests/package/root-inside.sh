#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Run by debian-package.sh inside a fresh Debian root (scripts/debroot run --ephemeral), with a clean environment:
# root-inside.sh TMP ARCHIVES. TMP/debs holds the packages and the test program; ARCHIVES keeps apt's downloads
# from run to run. Installs the packages with apt, checks where everything went, runs MPI jobs on the software HCA
# started from the package, purges the packages and their dependencies, and compares the root's files.
set -u -o pipefail
tmp=$1 archives=$2
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-y -q --no-install-recommends -o "Dir::Cache::Archives=$archives/" -o APT::Sandbox::User=root)
# The software HCA daemon and its checks, shared with the BTL tests, here with the installed programs.
SIMHCAD=simhcad SIMHCA_CTL=simhca-ctl work=$tmp
. "$(dirname "$0")/../btl/hca.sh"
. "$(dirname "$0")/leftovers.sh"

# Every file and directory of the root, but what the package tools and the kernel keep changing.
snapshot() {
    find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp -o -path /var/tmp \
        -o -path /var/cache -o -path /var/log -o -path /var/lib/apt -o -path /var/lib/dpkg -o -path /root \) -prune \
        -o -print | sort
}
debs=("$tmp"/debs/btl-xrc_*.deb "$tmp"/debs/simhca_*.deb)
# What apt resolves for the packages comes first, so that the root's files before the packages are known: the
# dependencies' maintainer scripts change the root too (groups, alternatives), and they stay until the end.
deps=()
install_deps() {
    apt-get install -s "${apt_opts[@]}" "${debs[@]}" >"$tmp/resolve.log" 2>&1 || return 1
    mapfile -t deps < <(awk '$1 == "Inst" && $2 != "btl-xrc" && $2 != "simhca" { print $2 }' "$tmp/resolve.log")
    [ ${#deps[@]} = 0 ] || { apt-get install "${apt_opts[@]}" "${deps[@]}" && apt-mark auto "${deps[@]}"; } >"$tmp/deps.log" 2>&1
}
# The root's package lists date from when it was made: when the mirror has moved on, fetch them again.
if ! install_deps && ! { apt-get update -q >"$tmp/update.log" 2>&1 && install_deps; }; then
    tail -30 "$tmp/resolve.log" "$tmp/deps.log" 2>/dev/null
    echo "FAIL: apt cannot resolve or install the packages' dependencies"
    exit 1
fi
snapshot >"$tmp/files.before"
if apt-get install "${apt_opts[@]}" "${debs[@]}" >"$tmp/install.log" 2>&1; then
    pass "apt-get install ./btl-xrc_*.deb ./simhca_*.deb (${#deps[@]} dependencies resolved by apt)"
else
    tail -30 "$tmp/install.log"
    echo "FAIL: apt-get install of the packages"
    exit 1
fi
dpkg -L btl-xrc simhca | sort -u >"$tmp/owned"

# Where things went: the component and its help file in Open MPI's own directories, the software HCA's library
# outside the system library path.
ompi_dir() { ompi_info --path "$1" --parsable | sed -n "s|^path:$1:||p"; }
pkglibdir=$(ompi_dir pkglibdir) pkgdatadir=$(ompi_dir pkgdatadir)
if [ -f "$pkglibdir/mca_btl_xrc.so" ] && [ -f "$pkgdatadir/help-mpi-btl-xrc.txt" ]; then
    pass "component in $pkglibdir, help file in $pkgdatadir"
else
    fail "no mca_btl_xrc.so in $pkglibdir or no help-mpi-btl-xrc.txt in $pkgdatadir"
fi
simhca_lib=$(grep '/libibverbs\.so\.1$' "$tmp/owned")
if [ -n "$simhca_lib" ] && ! ldconfig -p | grep -q "=> $(dirname "$simhca_lib")/"; then
    pass "the software HCA's library ($simhca_lib) is not in the system library path"
else
    fail "the software HCA's library is missing or in ld.so's path: ${simhca_lib:-none}"
fi

# ompi_info lists the component and its parameters.
ompi_info >"$tmp/ompi_info.out" 2>&1
ompi_info --param btl xrc --level 9 >"$tmp/ompi_info.param" 2>&1
if grep -qE '^ *MCA btl: xrc \(' "$tmp/ompi_info.out" && grep -q '"btl_xrc_receive_queues"' "$tmp/ompi_info.param"; then
    pass "ompi_info: $(grep -E '^ *MCA btl: xrc \(' "$tmp/ompi_info.out" | sed 's/^ *//'), $(grep -c 'parameter "btl_xrc_' "$tmp/ompi_info.param") parameters"
else
    fail "ompi_info does not list btl xrc"; head -20 "$tmp/ompi_info.out" "$tmp/ompi_info.param"
fi

# The software HCA from the package: its daemon, stopped by pid.
export SIMHCA_INSTANCE=debian-package-$$
# simcluster from the package, stopped by `simcluster down` (which stops its daemons by pid).
export SIMCLUSTER_STATE=/var/tmp/simcluster-debian-package.$$
cluster_down() { [ -d "$SIMCLUSTER_STATE" ] || return 0; simcluster down >/dev/null 2>&1 || simcluster clean >/dev/null 2>&1; rm -rf "$SIMCLUSTER_STATE"; }
trap 'stop_daemon; cluster_down' EXIT
start_daemon

# Where the package needs /etc/profile.d (Debian 13), the same plain mpirun outside a login shell (cron, a service,
# `ssh host cmd`, `bash -c` from a clean environment), which reads no profile: it must stop promptly in MPI_Init
# (README, "Open MPI 5.0 on Debian 13"), or work, never hang or run over another BTL. Open MPI's own message naming
# the component does not always reach the terminal: the processes may abort before it is passed on.
if [ -f /etc/profile.d/btl-xrc.sh ]; then
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 SIMHCA_INSTANCE="$SIMHCA_INSTANCE" bash -c '
        . /usr/share/btl-xrc/simcluster-ompi-env && simcluster_ompi_env &&
        exec timeout -k 5 120 simhca-run mpirun -np 2 --mca pml ob1 --mca btl self,vader,xrc "$1"' \
        non-login "$tmp/debs/allpairs" >"$tmp/job0.out" 2>&1
    nonlogin_status=$?
    if [ $nonlogin_status = 0 ] && grep -aqE '^allpairs: OK .*errors=0' "$tmp/job0.out"; then
        pass "non-login shell: a plain mpirun finds the component without /etc/profile.d: $(grep -aE '^allpairs: OK' "$tmp/job0.out")"
    elif [ $nonlogin_status != 0 ] && [ $nonlogin_status -lt 124 ] && grep -aq 'An error occurred in MPI_Init' "$tmp/job0.out"; then
        if grep -aq 'A requested component was not found' "$tmp/job0.out" && grep -aqE '^Component: +xrc' "$tmp/job0.out"; then
            said="Open MPI's \"A requested component was not found ... Framework: btl Component: xrc\""
        else
            said="\"An error occurred in MPI_Init\" only (Open MPI's message naming btl xrc did not get through)"
        fi
        pass "non-login shell: a plain mpirun stops in MPI_Init (status $nonlogin_status) with $said"
    else
        fail "non-login shell: the plain mpirun ended with status $nonlogin_status, not with an error in MPI_Init"
        tail -20 "$tmp/job0.out"
    fi
    expect_no_objects "the non-login shell's job"
fi

# The jobs run as from an administrator's login shell: /etc/profile and its /etc/profile.d scripts. Where PMIx
# hides Open MPI's component directory from mpirun's processes (Debian 13), the package's /etc/profile.d/btl-xrc.sh
# is one of them (debian/btl-xrc.profile.in).
set +u
# shellcheck disable=SC1091
. /etc/profile
set -u
if [ -f /etc/profile.d/btl-xrc.sh ]; then
    if [ "${OMPI_MCA_mca_base_component_path:-}" = "$pkglibdir:$HOME/.openmpi/components" ]; then
        pass "login shell: /etc/profile.d/btl-xrc.sh sets Open MPI's default component path ($OMPI_MCA_mca_base_component_path)"
    else
        fail "login shell: OMPI_MCA_mca_base_component_path is '${OMPI_MCA_mca_base_component_path:-unset}', expected '$pkglibdir:$HOME/.openmpi/components'"
    fi
fi
# mpirun as on a test machine (root, no binding, oversubscribed, idle ranks yielding), the shared launcher
# environment from the package; nothing else about the component's path.
# shellcheck source=../../src/simcluster/simcluster-ompi-env
. /usr/share/btl-xrc/simcluster-ompi-env
simcluster_ompi_env
job() { # NAME OUT MPIRUN-ARGS...
    local name=$1 out=$2
    shift 2
    if timeout -k 5 180 simhca-run mpirun -np 2 --mca pml ob1 "$@" >"$out" 2>&1 &&
        grep -qE '^allpairs: OK .*errors=0' "$out"; then
        pass "$name: $(grep -E '^allpairs: OK' "$out")"
    else
        fail "$name"; tail -20 "$out"
    fi
}
# The plain command: the component is found in Open MPI's directory and chosen on the software HCA.
job "mpirun --mca btl self,vader,xrc, 2 ranks" "$tmp/job1.out" --mca btl self,vader,xrc --mca btl_xrc_verbose 1 \
    "$tmp/debs/allpairs"
if grep -qE 'btl:xrc: .*: using simhca0:1 ' "$tmp/job1.out"; then pass "$(grep -m1 -oE 'btl:xrc: .*: using simhca0:1 .*' "$tmp/job1.out")"
else fail "btl xrc was not used on the software HCA (btl_xrc_verbose 1 says nothing)"; fi
expect_no_objects "self,vader,xrc job"
# Without vader every message crosses the HCA: its counters must show the traffic.
job "mpirun --mca btl self,xrc, 2 ranks, MPI_T counters" "$tmp/job2.out" --mca btl self,xrc "$tmp/debs/allpairs" --pvars
sent=$(pvar_sum bytes_sent "$tmp/job2.out") received=$(pvar_sum bytes_received "$tmp/job2.out")
if [ "$sent" -gt 0 ] && [ "$sent" = "$received" ]; then pass "btl xrc carried $sent bytes, received $received"
else fail "btl xrc counters: $sent bytes sent, $received received"; fi
expect_no_objects "self,xrc job"
if xrc-status >"$tmp/xrc-status.out" 2>&1; then pass "xrc-status after the jobs: $(head -1 "$tmp/xrc-status.out")"
else fail "xrc-status after the jobs"; cat "$tmp/xrc-status.out"; fi
stop_daemon

# Two simulated nodes from the package (simcluster finds the installed simhcad and library by itself): vader
# cannot reach the other node, so the plain command's traffic crosses btl xrc.
if simcluster up --nodes 2 --slots 1 >"$tmp/simcluster.log" 2>&1; then
    if timeout -k 5 180 simcluster run mpirun -np 2 --mca pml ob1 --mca btl self,vader,xrc "$tmp/debs/allpairs" \
        --expect nodeA:1,nodeB:1 --pvars >"$tmp/job3.out" 2>&1 && grep -qE '^allpairs: OK .*errors=0' "$tmp/job3.out" &&
        [ "$(pvar_sum bytes_sent "$tmp/job3.out")" -gt 0 ]; then
        pass "simcluster, 2 nodes, mpirun --mca btl self,vader,xrc: $(grep -E '^allpairs: OK' "$tmp/job3.out"), $(pvar_sum bytes_sent "$tmp/job3.out") bytes over xrc"
    else
        fail "simcluster job"; tail -20 "$tmp/job3.out"
    fi
    for node in nodeA nodeB; do
        status=$(simcluster exec "$node" simhca-ctl status 2>&1 | sed -n 2p)
        hca_is_empty "$status" && pass "simcluster: no object left in $node's HCA" ||
            fail "simcluster: $node's HCA holds: $status"
    done
else
    fail "simcluster up"; tail -20 "$tmp/simcluster.log"
fi
cluster_down

# Purge the packages: the root must have the files it had before them. Then their dependencies go the same way.
apt-get purge "${apt_opts[@]}" btl-xrc simhca >"$tmp/purge.log" 2>&1 || { tail -20 "$tmp/purge.log"; fail "apt-get purge"; }
left=$(while read -r f; do [ -d "$f" ] && continue; { [ -e "$f" ] || [ -L "$f" ]; } && echo "$f"; done <"$tmp/owned")
[ -z "$left" ] && pass "purge: no file of btl-xrc or simhca left" || fail "purge left: $left"
snapshot >"$tmp/files.after"
new=$(comm -13 "$tmp/files.before" "$tmp/files.after")
gone=$(comm -23 "$tmp/files.before" "$tmp/files.after")
if [ -z "$new$gone" ]; then pass "purge: the root's files are those before the install ($(wc -l <"$tmp/files.after") paths)"
else fail "the root differs after purge: new: ${new:-none}; gone: ${gone:-none}"; fi
if apt-get autoremove --purge "${apt_opts[@]}" >>"$tmp/purge.log" 2>&1 && ! dpkg -l "${deps[@]}" 2>/dev/null | grep -q '^ii'; then
    pass "apt-get autoremove --purge: the ${#deps[@]} dependencies are gone too"
else
    fail "apt-get autoremove --purge left dependencies installed"; tail -20 "$tmp/purge.log"
fi
# The kept downloads: only what the mirror still has.
apt-get autoclean "${apt_opts[@]}" >/dev/null 2>&1

# Nothing that the packages, the daemons, the launchers or the simulated nodes started may outlive them.
left=$(processes_in_this_root)
[ -z "$left" ] && pass "no process left in the root" || fail "processes left in the root:$left"
finish
