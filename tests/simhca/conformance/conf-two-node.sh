#!/bin/sh
# The same rdma-core programs and perftest between TWO simulated nodes (network namespaces from
# src/simcluster, one simhcad per node, daemons talking TCP over the simulated fabric): server on nodeA,
# client(s) on nodeB. Needs root (namespaces, veth): SKIP otherwise.
. "$(dirname "$0")/conf-common.sh"
[ "$(id -u)" = 0 ] || skip_all "needs root (simcluster: namespaces, veth pairs)"
: "${SIMCLUSTER:=$top/src/simcluster/simcluster}"
[ -x "$SIMCLUSTER" ] || skip_all "simcluster not found ($SIMCLUSTER)"
CONF_PROBE=$(readlink -f "$CONF_PROBE")
SIMHCA_LIBDIR=$(readlink -f "$SIMHCA_LIBDIR")
SIMHCAD=$(readlink -f "$SIMHCAD")
# Nodes get a private /tmp: a build tree under /tmp must be shared into them explicitly (simcluster's
# SIMCLUSTER_SHARE), or the probe, the library and the daemon would not exist inside the nodes.
for p in "$(dirname "$CONF_PROBE")" "$SIMHCA_LIBDIR" "$(dirname "$SIMHCAD")"; do
    case "$p" in /tmp/*) SIMCLUSTER_SHARE="$p${SIMCLUSTER_SHARE:+:$SIMCLUSTER_SHARE}" ;; esac
done
export SIMCLUSTER_SHARE

# A private cluster (never under /tmp: nodes get their own /tmp); torn down by pid in cleanup.
export SIMCLUSTER_STATE="/var/tmp/simcluster-conf.$$"
export SIMHCAD SIMHCA_LIBDIR
unset SIMHCA_INSTANCE   # node daemons use the default name inside their own network namespace
extra_cleanup() {
    "$SIMCLUSTER" down > /dev/null 2>&1 || "$SIMCLUSTER" clean > /dev/null 2>&1
    rm -rf "$SIMCLUSTER_STATE"
}
if ! timeout 120 "$SIMCLUSTER" up --nodes 2 --slots 1 > "$scratch/up.log" 2>&1; then
    echo "FAIL: conf-two-node: simcluster up failed:"; tail -20 "$scratch/up.log"
    exit 1
fi
PROBE_PREFIX="$SIMCLUSTER exec nodeA"
on() { node=$1; shift; "$SIMCLUSTER" exec "$node" "$@"; }

# Is TCP port $2 listening inside node $1?
listening_in() {
    hex=$(printf '%04X' "$2")
    on "$1" cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }'
}

# pair LABEL SECONDS CLIENTS TOOL ARGS...: TOOL ARGS on nodeA, CLIENTS x (TOOL ARGS nodeA) on nodeB.
port=18600
pair() {
    label=$1 secs=$2 nclients=$3
    shift 3
    port=$((port + 1))
    out="$scratch/$(echo "$label" | tr -c 'A-Za-z0-9_.-' '_')"
    srv_extra=""
    [ "$nclients" -gt 1 ] && srv_extra="-c $nclients"
    attempt=1
    while :; do
        timeout -k 5 "$secs" "$SIMCLUSTER" exec nodeA "$@" -p $port $srv_extra > "$out.server" 2>&1 < /dev/null &
        spid=$!
        pids="$pids $spid"
        i=0
        while ! listening_in nodeA $port && [ $i -lt 50 ] && kill -0 "$spid" 2>/dev/null; do i=$((i + 1)); sleep 0.2; done
        cpids=""
        n=1
        while [ $n -le "$nclients" ]; do
            timeout -k 5 "$secs" "$SIMCLUSTER" exec nodeB "$@" -p $port nodeA > "$out.client$n" 2>&1 < /dev/null &
            cpids="$cpids $!"
            n=$((n + 1))
        done
        pids="$pids $cpids"
        ok=0
        for p in $cpids; do wait "$p" || ok=1; done
        if [ $ok -ne 0 ] && [ "$nclients" -eq 1 ] && [ $attempt -le $CM_RACE_RETRIES ] &&
           cm_startup_race "$out.client1"; then
            cm_race_restart "$label" "$spid" $attempt
            attempt=$((attempt + 1))
            port=$((port + 1))
            continue
        fi
        wait "$spid" || ok=1
        break
    done
    result "$label (nodeA <-> nodeB)" $ok "$out.server" "$out.client1"
}

# Gate "fabric": one short RC exchange between the nodes. Until the daemons carry traffic node to node,
# every case SKIPs with this reason instead of failing (feature_ok reads the cached verdict).
if feature_ok rc; then
    fport=18599
    on nodeA timeout 30 ibv_rc_pingpong -d simhca0 -p $fport -s 64 -n 5 > "$scratch/fabric.server" 2>&1 < /dev/null &
    fpid=$!
    pids="$pids $fpid"
    i=0
    while ! listening_in nodeA $fport && [ $i -lt 50 ] && kill -0 "$fpid" 2>/dev/null; do i=$((i + 1)); sleep 0.2; done
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
