#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Open MPI's own verbs transport (btl openib, which uses UD for its connection manager and RC/SRQ for data)
# between two ranks on one node, through the software HCA; the ping-pong checks every message's data.
# Without simhca-run and without SYSFS_PATH: openib finds the device through ibv_get_sysfs_path(), which
# returns the daemon's sysfs view.
# Starts a private simhcad (unique SIMHCA_INSTANCE) and stops it by pid. Needs root for mpirun's
# --allow-run-as-root only when run as root; SKIPs (77) without mpicc/mpirun.
set -u
: "${SIMHCAD:=../../src/simhca/simhcad}"
: "${SIMHCA_CTL:=../../src/simhca/simhca-ctl}"
: "${SIMHCA_LIBDIR:=../../src/simhca/lib/.libs}"
: "${MPICC:=mpicc}"
: "${MPIRUN:=mpirun}"
srcdir=${srcdir:-.}
command -v "$MPICC" >/dev/null && command -v "$MPIRUN" >/dev/null || { echo "SKIP: no mpicc/mpirun"; exit 77; }
# Open MPI 5.0 has no openib BTL (verbs only through UCX/libfabric).
ompi_info --param btl openib 2>/dev/null | grep -q 'MCA btl: openib' ||
    { echo "SKIP: this Open MPI has no btl openib ($(ompi_info --version 2>/dev/null | head -1))"; exit 77; }
export SIMHCA_INSTANCE="ompi-$$"
work=$(mktemp -d /tmp/simhca-ompi-XXXXXX)
. "$(dirname "$0")/../lib/hca.sh"
hca_daemon_pid=
trap 'hca_daemon_stop "$hca_daemon_pid"; rm -rf "$work"' EXIT
hca_daemon_start "$work/simhcad.log" --node ompi --sysfs "$work/sysfs/class/infiniband/simhca0" ||
    { echo "FAIL: simhcad did not start"; exit 1; }
"$MPICC" -O2 -o "$work/pp" "$srcdir/ompi_pingpong.c" || { echo "FAIL: cannot build the MPI test"; exit 1; }
export LD_LIBRARY_PATH="$SIMHCA_LIBDIR"
unset SYSFS_PATH
root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
out=$(timeout 120 "$MPIRUN" "${root[@]}" -np 2 -x LD_LIBRARY_PATH -x SIMHCA_INSTANCE \
    --mca pml ob1 --mca btl openib,self --mca btl_openib_allow_ib 1 \
    --mca btl_openib_warn_no_device_params_found 0 --mca mpi_yield_when_idle 1 \
    --mca hwloc_base_binding_policy none "$work/pp" 2>&1)
rc=$?
echo "$out"
if [ $rc -ne 0 ] || ! echo "$out" | grep -q "1048576 bytes"; then
    echo "FAIL: Open MPI openib ping-pong (rc $rc)"
    exit 1
fi
echo "PASS: Open MPI btl openib ping-pong on simhca0"
