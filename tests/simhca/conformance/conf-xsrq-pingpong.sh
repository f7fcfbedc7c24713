#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Unmodified ibv_xsrq_pingpong: one server and several client PROCESSES on this node; every process opens
# the same XRC domain file, so they share one XRCD (keyed by inode) and the server's XRC SRQs, as
# xrc-semantics.md requires. Sizes, polling and -e.
. "$(dirname "$0")/conf-common.sh"
start_daemon
CLIENTS=3

for events in "" "-e"; do
    for size in 64 4096; do
        label="ibv_xsrq_pingpong -c $CLIENTS -s $size $events"
        if [ -n "$events" ]; then gate "$label" xrc events || continue; else gate "$label" xrc || continue; fi
        port=$(free_port)
        args="-d simhca0 -p $port -s $size -n 10 $events"
        out="$scratch/xsrq.$size$events"
        timeout -k 5 90 ibv_xsrq_pingpong $args -c $CLIENTS > "$out.server" 2>&1 < /dev/null &
        spid=$!
        pids="$pids $spid"
        i=0
        while ! listening "$port" && [ $i -lt 100 ] && kill -0 "$spid" 2>/dev/null; do i=$((i + 1)); sleep 0.1; done
        cpids=""
        n=1
        while [ $n -le $CLIENTS ]; do
            timeout -k 5 90 ibv_xsrq_pingpong $args localhost > "$out.client$n" 2>&1 < /dev/null &
            cpids="$cpids $!"
            n=$((n + 1))
        done
        pids="$pids $cpids"
        ok=0
        for p in $cpids $spid; do wait "$p" || ok=1; done
        result "$label" $ok "$out.server" "$out.client1" "$out.client2" "$out.client3"
    done
done
finish
