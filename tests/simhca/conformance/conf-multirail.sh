#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Several rails: `simcluster up --rails 2` gives every node one device with two ports, each port on a fabric
# of its own. Unmodified ibv_devinfo lists both ports ACTIVE with their own LIDs and subnet prefixes;
# perftest runs between two nodes over port 2 (-i 2) and over port 1 (that another rail's LID is unreachable:
# test_multiport.cpp); UCX lists and uses both ports (UCX_NET_DEVICES). Then the
# same with --rail-layout devices (two devices of one port). No object is left in any HCA.
. "$(dirname "$0")/conf-common.sh"
. "$(dirname "$0")/conf-cluster.sh"
cluster_up 2 1 --rails 2

# 1. ibv_devinfo inside a node: two ports, each ACTIVE, LIDs 1 and 101 on nodeA, prefixes fe80::0 / fe80::1.
on nodeA ibv_devinfo -v -d simhca0 > "$scratch/devinfo" 2>&1
rc=$?
missing=""
while IFS='~' read -r pattern what; do
    [ "$(grep -Ec "$pattern" "$scratch/devinfo")" -ge 1 ] || missing="$missing; $what"
done <<'EOT'
phys_port_cnt:[[:space:]]+2~phys_port_cnt 2
port:[[:space:]]+1$~port 1
port:[[:space:]]+2$~port 2
port_lid:[[:space:]]+1$~port 1 LID 1
port_lid:[[:space:]]+101$~port 2 LID 101
GID\[[[:space:]]*0\]:[[:space:]]+fe80:0000:0000:0000:~port 1 on fabric 1 (prefix fe80::0)
GID\[[[:space:]]*0\]:[[:space:]]+fe80:0000:0000:0001:~port 2 on fabric 2 (prefix fe80::1)
EOT
[ "$(grep -Ec 'state:[[:space:]]+PORT_ACTIVE' "$scratch/devinfo")" -eq 2 ] || missing="$missing; both ports ACTIVE"
[ $rc -eq 0 ] && [ -z "$missing" ]
ok=$?
[ -n "$missing" ] && echo "  missing from ibv_devinfo -v:${missing#;}"
result "ibv_devinfo lists two ports with their own LIDs and subnet prefixes" $ok "$scratch/devinfo"

# 2. perftest between the nodes over each port (perftest checks nothing in the data; it fails on any error).
pair "ib_send_bw -i 2 (port 2)" 90 1 ib_send_bw -d simhca0 -i 2 -c RC -F -n 200 -s 65536
pair "ib_write_bw -i 2 (port 2)" 90 1 ib_write_bw -d simhca0 -i 2 -c RC -F -n 200 -s 65536
pair "ib_send_lat -i 1 (port 1)" 90 1 ib_send_lat -d simhca0 -i 1 -c RC -F -n 200 -s 64
pair "ib_send_bw -i 2 -c XRC (port 2)" 90 1 ib_send_bw -d simhca0 -i 2 -c XRC -F -n 200 -s 65536
# The port-2 counters moved, port 1's did not by the port-2 runs (no timeouts either way).
on nodeB cat /tmp/.simhca-sysfs/class/infiniband/simhca0/ports/2/hw_counters/local_ack_timeout_err \
    > "$scratch/cnt" 2>&1
[ "$(cat "$scratch/cnt")" = 0 ]
result "port 2 of nodeB has its own counters (no ACK timeout in the runs)" $? "$scratch/cnt"

# 3. UCX: both ports listed, and a UCT bandwidth run on each port, and a UCP run over both.
if command -v ucx_info > /dev/null && command -v ucx_perftest > /dev/null; then
    on nodeA ucx_info -d > "$scratch/ucx_info.out" 2>&1
    for dev in simhca0:1 simhca0:2; do
        awk -v d="$dev" '$2 == "Transport:" { t = $3 } $2 == "Device:" && t == "rc_verbs" && $3 == d { f = 1 }
            END { exit !f }' "$scratch/ucx_info.out"
        result "ucx_info -d: rc_verbs on $dev" $? "$scratch/ucx_info.out"
    done
    pair "ucx uct put_bw rc_verbs on simhca0:2" 90 1 ucx_perftest -t put_bw -x rc_verbs -d simhca0:2 -D zcopy \
        -s 1048576 -n 50 -w 5
    pair "ucx tag_bw rc_v over simhca0:1,simhca0:2" 90 1 env UCX_TLS=rc_v UCX_NET_DEVICES=simhca0:1,simhca0:2 \
        UCX_MAX_RNDV_RAILS=2 ucx_perftest -t tag_bw -s 1048576 -n 50 -w 5
else
    echo "SKIP: UCX cases (ucx-utils not installed)"
    skipped=$((skipped + 1))
fi
expect_no_objects_in nodeA nodeB

# 4. Rails as devices: two devices of one port each; perftest on the second device.
cluster_up 2 1 --rails 2 --rail-layout devices
on nodeA ibv_devices > "$scratch/devices" 2>&1
grep -q simhca0 "$scratch/devices" && grep -q simhca1 "$scratch/devices"
result "--rail-layout devices: ibv_devices lists simhca0 and simhca1" $? "$scratch/devices"
pair "ib_send_bw -d simhca1 (rail 2 as a device)" 90 1 ib_send_bw -d simhca1 -i 1 -c RC -F -n 200 -s 65536
expect_no_objects_in nodeA nodeB
finish
