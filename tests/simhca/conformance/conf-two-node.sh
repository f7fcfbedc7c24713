#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The same rdma-core programs and perftest between TWO simulated nodes (conf-cluster.sh): server on nodeA,
# client(s) on nodeB. Needs root (namespaces, veth): SKIP otherwise.
. "$(dirname "$0")/conf-common.sh"
. "$(dirname "$0")/conf-cluster.sh"
cluster_up 2 1

# Gate "fabric": one short RC exchange between the nodes. Until the daemons carry traffic node to node,
# every case SKIPs with this reason instead of failing (feature_ok reads the cached verdict).
if feature_ok rc; then
    fport=18599
    on nodeA timeout 30 ibv_rc_pingpong -d simhca0 -p $fport -s 64 -n 5 > "$scratch/fabric.server" 2>&1 < /dev/null &
    fpid=$!
    pids="$pids $fpid"
    wait_listening_in nodeA $fport "$fpid"
    if on nodeB timeout 30 ibv_rc_pingpong -d simhca0 -p $fport -s 64 -n 5 nodeA > "$scratch/fabric.client" 2>&1 < /dev/null &&
       wait "$fpid"; then
        echo ok > "$scratch/probe.fabric"
    else
        echo "node-to-node RC not working yet: $(grep -v '^ *\(local\|remote\) address' "$scratch/fabric.client" | head -1)" > "$scratch/probe.fabric"
    fi
    wait "$fpid" 2>/dev/null
fi

# label | features | clients | command (server and client take the same arguments)
while IFS='|' read -r label features clients cmd; do
    [ -n "$label" ] || continue
    # shellcheck disable=SC2086
    gate "$label" $features || continue
    # shellcheck disable=SC2086
    pair "$label" 90 "$clients" $cmd
done <<'EOT'
ibv_rc_pingpong -c|rc fabric|1|ibv_rc_pingpong -d simhca0 -s 4096 -n 100 -c
ibv_rc_pingpong -c -e|rc events fabric|1|ibv_rc_pingpong -d simhca0 -s 65536 -n 50 -c -e
ibv_srq_pingpong -c|srq fabric|1|ibv_srq_pingpong -d simhca0 -q 4 -s 4096 -n 50 -c
ibv_ud_pingpong -c|ud fabric|1|ibv_ud_pingpong -d simhca0 -s 2048 -n 100 -c
ibv_xsrq_pingpong (2 client processes)|xrc fabric|2|ibv_xsrq_pingpong -d simhca0 -s 4096 -n 10
ib_send_lat -c RC|rc fabric|1|ib_send_lat -d simhca0 -c RC -F -n 200 -s 64
ib_send_bw -c UD|ud fabric|1|ib_send_bw -d simhca0 -c UD -F -n 200 -s 2048
ib_send_bw -c XRC|xrc fabric|1|ib_send_bw -d simhca0 -c XRC -F -n 200 -s 65536
ib_write_bw -c RC|rc rdma fabric|1|ib_write_bw -d simhca0 -c RC -F -n 200 -s 65536
ib_read_lat -c XRC|xrc rdma fabric|1|ib_read_lat -d simhca0 -c XRC -F -n 200 -s 64
ib_atomic_lat -c RC|rc atomic fabric|1|ib_atomic_lat -d simhca0 -c RC -F -n 200
ib_send_bw -c RC -R (RDMA CM)|rc fabric|1|ib_send_bw -d simhca0 -c RC -R -F -n 200 -s 65536
ib_send_bw -c UD -R (RDMA CM)|ud fabric|1|ib_send_bw -d simhca0 -c UD -R -F -n 200 -s 2048
EOT
finish
