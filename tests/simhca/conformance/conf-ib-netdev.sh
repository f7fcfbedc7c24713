#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# conf-ib-netdev.sh WORKDIR SYSFS_ROOT IFNAME CMD [ARGS...]
# Runs CMD where /sys/class/infiniband/simhca0 is the daemon's device (SYSFS_ROOT, `simhca-ctl sysfs-root`)
# with an IPoIB-like net interface, device/net/IFNAME, as the kernel shows one for an HCA port. pyverbs'
# RDMA CM tests (base.py, RDMATestCase._get_ip_mac) look there, at the real path, for the interface whose
# IP address they connect to. Must run as root inside a private mount namespace (conf-pyverbs.sh starts
# it with `unshare -m --propagation private`), so nothing outside the namespace changes.
#
# /sys/class cannot take a new directory (sysfs), so a tmpfs covers it; every original class directory is
# bind-mounted back at its own path (their entries are relative links to ../../devices, which then still
# resolve), and infiniband/simhca0 is a directory of links to the daemon's live files plus device/net/IFNAME.
set -e
work=$1 root=$2 ifname=$3
shift 3
dev=$root/class/infiniband/simhca0
[ -d "$dev" ] || { echo "conf-ib-netdev: no device at $dev" >&2; exit 1; }

ib=$work/ib-sysfs/simhca0
rm -rf "$work/ib-sysfs"
mkdir -p "$ib/device/net/$ifname"
for e in "$dev"/*; do
    [ "$(basename "$e")" = device ] || ln -s "$e" "$ib/"
done
for e in "$dev"/device/*; do
    ln -s "$e" "$ib/device/"
done

orig=$work/sys-class
mkdir -p "$orig"
mount --bind /sys/class "$orig"
mount -t tmpfs -o mode=755 simhca-sys-class /sys/class
for c in "$orig"/*; do
    name=$(basename "$c")
    mkdir "/sys/class/$name"
    mount --bind "$c" "/sys/class/$name"
done
mkdir -p /sys/class/infiniband
ln -s "$ib" /sys/class/infiniband/simhca0
exec "$@"
