#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Unmodified ibv_ud_pingpong: UD with address handles; sizes up to the 4096-byte MTU's payload, polling and
# -e, data check.
. "$(dirname "$0")/conf-common.sh"
start_daemon

for events in "" "-e"; do
    for size in 1 1024 4096; do
        label="ibv_ud_pingpong -s $size -c $events"
        if [ -n "$events" ]; then gate "$label" ud events || continue; else gate "$label" ud || continue; fi
        port=$(free_port)
        args="-d simhca0 -p $port -s $size -n 100 -c $events"
        run_pair "$label" 60 "$port" ibv_ud_pingpong $args -- ibv_ud_pingpong $args localhost
    done
done
finish
