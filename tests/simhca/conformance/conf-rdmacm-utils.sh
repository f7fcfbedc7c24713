#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# rdma-core's RDMA CM example programs (Debian rdmacm-utils), unmodified, over the software HCA's librdmacm
# and libibverbs on one node:
#   rping            RC: connect, SEND of the buffer's address, RDMA READ and WRITE, data validated (-V);
#                    also with -q (the application's own QP, moved through rdma_init_qp_attr)
#   udaddy           UD: address and route resolution, SIDR lookup, sends both ways
#   rdma_server / rdma_client   the synchronous endpoint API (rdma_getaddrinfo, rdma_create_ep,
#                    rdma_get_request, rdma_post_send/recv, rdma_get_send/recv_comp)
#   rdma_xserver / rdma_xclient  the same with RC (their default)
#   mckey            multicast join, sends to the group, receive, leave
#   cmtime           set-up and teardown of 20 connections (its server keeps serving: stopped by pid)
# Not run: rstream, riostream, rcopy, udpong (rsockets are not implemented) and rdma_xserver -c x (XRC
# through the RDMA CM is not implemented); rdmacm/README.md lists both.
. "$(dirname "$0")/conf-common.sh"
command -v rping > /dev/null 2>&1 || skip_all "rdmacm-utils is not installed (rping, udaddy, ...)"
start_daemon
# Our librdmacm sits next to our libibverbs (start_daemon put that directory first in LD_LIBRARY_PATH).
[ -e "$SIMHCA_LIBDIR/librdmacm.so.1" ] || skip_all "our librdmacm is not built ($SIMHCA_LIBDIR/librdmacm.so.1)"

port=$(free_port)
run_pair "rping -V (RC, RDMA read and write, 100 pings of 1000 B validated)" 60 "$port" \
    rping -s -a 127.0.0.1 -p "$port" -C 100 -S 1000 -V -- rping -c -a 127.0.0.1 -p "$port" -C 100 -S 1000 -V
port=$(free_port)
run_pair "rping -V -q (the application's own QP)" 60 "$port" \
    rping -s -a 127.0.0.1 -p "$port" -C 20 -S 4096 -V -q -- rping -c -a 127.0.0.1 -p "$port" -C 20 -S 4096 -V -q
# udaddy's port is fixed (7174; its -p chooses the port space).
run_pair "udaddy (UD, SIDR lookup, sends both ways)" 60 7174 udaddy -C 20 -S 1024 -- udaddy -s 127.0.0.1 -C 20 -S 1024
port=$(free_port)
run_pair "rdma_server / rdma_client (synchronous endpoint API)" 60 "$port" \
    rdma_server -p "$port" -- rdma_client -s 127.0.0.1 -p "$port"
port=$(free_port)
run_pair "rdma_xserver / rdma_xclient (RC)" 60 "$port" \
    rdma_xserver -p "$port" -c r -- rdma_xclient -s 127.0.0.1 -p "$port" -c r

# mckey: no listener to wait for; the receiver must have joined before the sender sends (a group does not
# keep messages), and it exits once it has received them all.
out="$scratch/mckey"
timeout -k 5 60 mckey -m 239.1.2.3 -C 20 -S 512 > "$out.receiver" 2>&1 < /dev/null &
rpid=$!
pids="$pids $rpid"
i=0
while ! grep -q 'mckey: joined' "$out.receiver" 2> /dev/null && [ $i -lt 100 ] && kill -0 $rpid 2> /dev/null; do
    i=$((i + 1))
    sleep 0.1
done
timeout -k 5 60 mckey -m 239.1.2.3 -C 20 -S 512 -s > "$out.sender" 2>&1 < /dev/null
src=$?
wait $rpid
rrc=$?
[ $src -eq 0 ] && [ $rrc -eq 0 ] && grep -q 'data transfers complete' "$out.receiver"
result "mckey (multicast join, 20 sends, receive, leave)" $? "$out.receiver" "$out.sender"

# cmtime: the client connects and disconnects 20 ids and prints the time of each step; success is its exit
# status and a server that is still running afterwards (then stopped by pid).
port=$(free_port)
out="$scratch/cmtime"
timeout -k 5 60 cmtime -p "$port" -c 20 > "$out.server" 2>&1 < /dev/null &
spid=$!
pids="$pids $spid"
wait_listening "$port" $spid
timeout -k 5 60 cmtime -s 127.0.0.1 -p "$port" -c 20 > "$out.client" 2>&1 < /dev/null
crc=$?
alive=1
kill -0 $spid 2> /dev/null || alive=0
kill -TERM $spid 2> /dev/null
wait $spid 2> /dev/null
[ $crc -eq 0 ] && [ $alive -eq 1 ] && grep -q '^connect' "$out.client"
result "cmtime (20 connections set up and torn down)" $? "$out.client" "$out.server"

# Nothing the programs created outlives them in the adapter.
left=$("$SIMHCA_CTL" list --json 2> /dev/null | $PY -c 'import json, sys
d = json.load(sys.stdin)
print(" ".join("%s=%d" % (k, d[k]) for k in ("qps", "srqs", "cqs", "mrs", "pds", "xrcds") if d.get(k)))' 2>&1)
[ -z "$left" ]
result "no object left in the software HCA after the programs exited${left:+ (left: $left)}" $?
finish
