#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Debian's perftest over the software HCA: latency and bandwidth tools with -c RC, UD (the send tools, the
# only ones perftest allows UD for) and -c XRC; one bandwidth run with -e; three with -R, where perftest
# connects through the RDMA CM (our librdmacm.so.1, rdmacm/README.md) instead of its own TCP exchange.
# Few iterations: this checks the tools work end to end, not speed (the benchmark is separate).
. "$(dirname "$0")/conf-common.sh"
start_daemon

# tool | connection | features needed | extra args
while IFS='|' read -r tool conn features extra; do
    [ -n "$tool" ] || continue
    label="$tool -c $conn $extra"
    # shellcheck disable=SC2086
    gate "$label" $features || continue
    port=$(free_port)
    args="-d simhca0 -p $port -c $conn -F $extra"
    run_pair "$label" 90 "$port" $tool $args -- $tool $args localhost
done <<'EOT'
ib_send_lat|RC|rc|-n 200 -s 64
ib_send_lat|UD|ud|-n 200 -s 64
ib_send_lat|XRC|xrc|-n 200 -s 64
ib_send_bw|RC|rc|-n 200 -s 65536
ib_send_bw|RC|rc events|-n 200 -s 65536 -e
ib_send_bw|UD|ud|-n 200 -s 2048
ib_send_bw|XRC|xrc|-n 200 -s 65536
ib_write_bw|RC|rc rdma|-n 200 -s 65536
ib_write_bw|XRC|xrc rdma|-n 200 -s 65536
ib_read_lat|RC|rc rdma|-n 200 -s 64
ib_read_lat|XRC|xrc rdma|-n 200 -s 64
ib_atomic_lat|RC|rc atomic|-n 200
ib_atomic_lat|XRC|xrc atomic|-n 200
ib_send_bw|RC|rc|-n 200 -s 65536 -R
ib_send_bw|UD|ud|-n 200 -s 2048 -R
ib_read_lat|RC|rc rdma|-n 200 -s 64 -R
EOT
finish
