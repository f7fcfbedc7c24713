#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# UCX, unmodified (Debian's UCX 1.13: libucx0 with libuct_ib, ucx-utils), on the software HCA between two
# simulated nodes (conf-cluster.sh): ucx_info lists the device with rc_verbs and ud_verbs; ucx_perftest
# (UCP tag/stream/RMA/atomics, UCT active messages, put, get, atomics) and io_demo with its data integrity
# check (-q) pass for both transports; Open MPI's pml ucx runs the verified MPI programs (allpairs,
# collectives, one-sided through osc ucx) on 2x2 ranks over each transport; no object is left in any HCA.
# Needs root: SKIP otherwise.
#
# Transport lists: UCX_TLS=rc_v is UCX's own name for rc_verbs together with ud_verbs for wire-up only
# (ucx_info -f: "rc_v: rc verbs (uses ud for bootstrap)"). rc_verbs alone cannot reach a peer by its
# worker address ("no auxiliary transport"): that is UCX's design, on any HCA. The MPI runs check in UCX's
# own endpoint report (UCX_LOG_LEVEL=info) that messages between nodes go through the transport under test.
. "$(dirname "$0")/conf-common.sh"
command -v ucx_info > /dev/null && command -v ucx_perftest > /dev/null || skip_all "ucx-utils not installed"
. "$(dirname "$0")/conf-cluster.sh"
: "${MPI_DIR:=$top/tests/mpi}"
: "${MPIRUN:=mpirun}"
for p in allpairs collectives onesided; do
    [ -x "$MPI_DIR/$p" ] || skip_all "MPI test program $MPI_DIR/$p not built"
done
MPI_DIR=$(readlink -f "$MPI_DIR")
share_into_nodes "$MPI_DIR"
cluster_up 2 2

# 1. The device and both verbs transports, as ucx_info sees them inside a node.
on nodeA ucx_info -d > "$scratch/ucx_info.out" 2>&1
for tl in rc_verbs ud_verbs; do
    awk -v tl="$tl" '$2 == "Transport:" { t = $3 } $2 == "Device:" && t == tl && $3 == "simhca0:1" { f = 1 }
        END { exit !f }' "$scratch/ucx_info.out"
    result "ucx_info -d: $tl on simhca0:1" $? "$scratch/ucx_info.out"
done

# 2. ucx_perftest, server on nodeA, client on nodeB (UCP tests pick the transport from UCX_TLS; UCT tests
# name it). ucx_perftest has no data check; io_demo below has one.
# label | UCX_TLS | arguments
while IFS='|' read -r label tls args; do
    [ -n "$label" ] || continue
    # shellcheck disable=SC2086
    pair "ucx_perftest $label" 90 1 env UCX_TLS=$tls ucx_perftest $args
done <<'EOT'
tag_lat rc_v|rc_v|-t tag_lat -s 8 -n 2000 -w 100
tag_bw 1 MiB rc_v (rendezvous)|rc_v|-t tag_bw -s 1048576 -n 100 -w 5
stream_bw rc_v|rc_v|-t stream_bw -s 65536 -n 200 -w 5
ucp_put_bw 1 MiB rc_v|rc_v|-t ucp_put_bw -s 1048576 -n 100 -w 5
ucp_get 64 KiB rc_v|rc_v|-t ucp_get -s 65536 -n 200 -w 5
ucp_fadd rc_v|rc_v|-t ucp_fadd -n 1000 -w 10
ucp_cswap rc_v|rc_v|-t ucp_cswap -n 1000 -w 10
tag_lat ud_verbs|ud_verbs|-t tag_lat -s 8 -n 2000 -w 100
tag_bw 1 MiB ud_verbs|ud_verbs|-t tag_bw -s 1048576 -n 50 -w 5
uct am_lat rc_verbs|all|-t am_lat -x rc_verbs -d simhca0:1 -n 2000 -w 100
uct am_bw zcopy rc_verbs|all|-t am_bw -x rc_verbs -d simhca0:1 -D zcopy -s 4000 -n 1000 -w 10
uct put_bw zcopy 1 MiB rc_verbs|all|-t put_bw -x rc_verbs -d simhca0:1 -D zcopy -s 1048576 -n 100 -w 5
uct get zcopy 64 KiB rc_verbs|all|-t get -x rc_verbs -d simhca0:1 -D zcopy -s 65536 -n 200 -w 5
uct fadd rc_verbs|all|-t fadd -x rc_verbs -d simhca0:1 -n 1000 -w 10
uct cswap rc_verbs|all|-t cswap -x rc_verbs -d simhca0:1 -n 1000 -w 10
uct am_lat ud_verbs|all|-t am_lat -x ud_verbs -d simhca0:1 -n 2000 -w 100
uct am_bw bcopy ud_verbs|all|-t am_bw -x ud_verbs -d simhca0:1 -D bcopy -s 4000 -n 1000 -w 10
EOT

# 3. io_demo with data integrity checks (-q), reads and writes of 1 B .. 1 MB, connected by address through
# UCX's RDMA CM component, i.e. our librdmacm. (UCX's default also opens its TCP connection manager on the
# same port, which our RDMA CM refuses: its port space is the kernel's TCP one, see rdmacm/README.md.)
addrA=$(on nodeA getent hosts nodeA | awk '{ print $1; exit }')
for tls in rc_v ud_verbs; do
    port=$((port + 1))
    label="io_demo -q read,write $tls"
    out="$scratch/io_demo.$tls"
    timeout -k 5 90 "$SIMCLUSTER" exec nodeA env UCX_TLS=$tls UCX_SOCKADDR_TLS_PRIORITY=rdmacm \
        io_demo -p $port -q -d 1:1000000 > "$out.server" 2>&1 < /dev/null &
    spid=$!
    pids="$pids $spid"
    wait_listening_in nodeA $port "$spid"
    timeout -k 5 90 "$SIMCLUSTER" exec nodeB env UCX_TLS=$tls UCX_SOCKADDR_TLS_PRIORITY=rdmacm \
        io_demo -p $port -q -d 1:1000000 -i 2000 -o read,write "$addrA" > "$out.client" 2>&1 < /dev/null
    crc=$?
    # The server runs until stopped; it is still alive when it found nothing wrong in what it received.
    kill -0 "$spid" 2>/dev/null
    alive=$?
    kill -TERM "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    [ $crc -eq 0 ] && [ $alive -eq 0 ] && grep -q "Client exit with status 'OK'" "$out.client"
    result "$label (nodeA <-> nodeB)" $? "$out.server" "$out.client"
done

# 4. Open MPI's pml ucx (Debian's openmpi-mca-params.conf excludes pml/osc ucx; --mca overrides it), 2x2
# ranks, with UCX's endpoint report: some endpoint between nodes uses the transport, none uses TCP.
# mpi_ucx LABEL UCX_TLS TRANSPORT PROGRAM [ARGS...]
mpi_ucx() {
    label=$1 tls=$2 tl=$3
    shift 3
    out="$scratch/mpi.$(echo "$label" | tr -c 'A-Za-z0-9_.-' '_')"
    timeout -k 5 150 "$SIMCLUSTER" run "$MPIRUN" --host nodeA:2,nodeB:2 --mca pml ucx --mca osc ucx \
        -x UCX_TLS="$tls" -x UCX_LOG_LEVEL=info "$@" > "$out" 2>&1 < /dev/null
    rc=$?
    prog=$(basename "$1")
    [ $rc -eq 0 ] && grep -q "^$prog: OK .*errors=0" "$out" &&
        grep -q "ep_cfg\[[0-9]*\]: tag($tl/simhca0:1" "$out" && ! grep 'ep_cfg\[' "$out" | grep -q 'tcp/'
    result "Open MPI pml ucx $label" $? "$out"
}
for t in "rc_v,self,sm rc_verbs" "ud_verbs,self,sm ud_verbs"; do
    # shellcheck disable=SC2086
    set -- $t
    mpi_ucx "allpairs UCX_TLS=$1" "$1" "$2" "$MPI_DIR/allpairs" --expect nodeA:2,nodeB:2
    mpi_ucx "collectives UCX_TLS=$1" "$1" "$2" "$MPI_DIR/collectives"
    mpi_ucx "onesided (osc ucx) UCX_TLS=$1" "$1" "$2" "$MPI_DIR/onesided"
done

expect_no_objects_in nodeA nodeB
finish
