#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Unmodified ibv_rc_pingpong over the software HCA: several sizes, polling and -e (completion events), with
# received data validated (-c); one run with the new post-send API (-N, ibv_qp_ex).
. "$(dirname "$0")/conf-common.sh"
start_daemon
ITERS=100

for events in "" "-e"; do
    for size in 1 4096 65536; do
        label="ibv_rc_pingpong -s $size -c $events"
        if [ -n "$events" ]; then gate "$label" rc events || continue; else gate "$label" rc || continue; fi
        port=$(free_port)
        args="-d simhca0 -p $port -s $size -n $ITERS -c $events"
        run_pair "$label" 60 "$port" ibv_rc_pingpong $args -- ibv_rc_pingpong $args localhost
    done
done

label="ibv_rc_pingpong -N (new send API)"
if gate "$label" rc qpex; then
    port=$(free_port)
    args="-d simhca0 -p $port -s 4096 -n $ITERS -c -N"
    run_pair "$label" 60 "$port" ibv_rc_pingpong $args -- ibv_rc_pingpong $args localhost
fi
finish
