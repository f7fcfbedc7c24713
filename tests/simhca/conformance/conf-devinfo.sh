#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Unmodified ibv_devices / ibv_devinfo -v see the software HCA as the contract describes it: device simhca0,
# XRC in the capability flags, port ACTIVE, MTU 4096, link layer InfiniBand.
. "$(dirname "$0")/conf-common.sh"
start_daemon

if gate "ibv_devices lists simhca0" device; then
    timeout 20 ibv_devices > "$scratch/devices" 2>&1
    grep -q 'simhca0' "$scratch/devices"
    result "ibv_devices lists simhca0" $? "$scratch/devices"
fi

if gate "ibv_devinfo -v" device; then
    timeout 20 ibv_devinfo -v -d simhca0 > "$scratch/devinfo" 2>&1
    rc=$?
    missing=""
    # Each line: what ibv_devinfo must print (extended regex) ~ what that is.
    while IFS='~' read -r pattern what; do
        grep -Eq "$pattern" "$scratch/devinfo" || missing="$missing; $what"
    done <<'EOT'
hca_id:[[:space:]]+simhca0~device name simhca0
vendor_id:[[:space:]]+0x02c9~vendor id 0x02c9 (Open MPI's device table)
vendor_part_id:[[:space:]]+4119~vendor part id 4119
^[[:space:]]+XRC[[:space:]]*$~XRC in device_cap_flags
state:[[:space:]]+PORT_ACTIVE~port ACTIVE
active_mtu:[[:space:]]+4096~active MTU 4096
link_layer:[[:space:]]+InfiniBand~link layer InfiniBand
EOT
    [ $rc -eq 0 ] && [ -z "$missing" ]
    ok=$?
    [ -n "$missing" ] && echo "  missing from ibv_devinfo -v:${missing#;}"
    result "ibv_devinfo -v shows simhca0 with XRC, PORT_ACTIVE, MTU 4096, InfiniBand" $ok "$scratch/devinfo"
fi
finish
