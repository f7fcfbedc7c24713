#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Unmodified ibv_srq_pingpong: several RC QPs sharing one SRQ per side; sizes, polling and -e, data check.
. "$(dirname "$0")/conf-common.sh"
start_daemon

for events in "" "-e"; do
    for size in 1 4096 16384; do
        label="ibv_srq_pingpong -q 4 -s $size -c $events"
        if [ -n "$events" ]; then gate "$label" srq events || continue; else gate "$label" srq || continue; fi
        port=$(free_port)
        args="-d simhca0 -p $port -q 4 -s $size -n 50 -c $events"
        run_pair "$label" 60 "$port" ibv_srq_pingpong $args -- ibv_srq_pingpong $args localhost
    done
done
finish
