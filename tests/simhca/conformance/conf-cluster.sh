# SPDX-License-Identifier: BSD-3-Clause
# Sourced after conf-common.sh by the conformance scripts that run between simulated nodes
# (src/simcluster: network namespaces, one simhcad per node, daemons talking TCP over the simulated
# fabric). Needs root (namespaces, veth): SKIP otherwise. The cluster is private to the script and torn
# down by pid in the EXIT trap (conf-common.sh calls extra_cleanup).
[ "$(id -u)" = 0 ] || skip_all "needs root (simcluster: namespaces, veth pairs)"
: "${SIMCLUSTER:=$top/src/simcluster/simcluster}"
[ -x "$SIMCLUSTER" ] || skip_all "simcluster not found ($SIMCLUSTER)"
CONF_PROBE=$(readlink -f "$CONF_PROBE")
SIMHCA_LIBDIR=$(readlink -f "$SIMHCA_LIBDIR")
SIMHCAD=$(readlink -f "$SIMHCAD")
# Nodes get a private /tmp: a build tree under /tmp must be shared into them explicitly (simcluster's
# SIMCLUSTER_SHARE), or the programs, the library and the daemon would not exist inside the nodes.
# share_into_nodes PATH...: the directories of these paths too (a script's own programs).
share_into_nodes() {
    for p in "$@"; do
        case "$p" in /tmp/*) SIMCLUSTER_SHARE="$p${SIMCLUSTER_SHARE:+:$SIMCLUSTER_SHARE}" ;; esac
    done
    export SIMCLUSTER_SHARE
}
share_into_nodes "$(dirname "$CONF_PROBE")" "$SIMHCA_LIBDIR" "$(dirname "$SIMHCAD")"

# A private cluster (never under /tmp: nodes get their own /tmp).
export SIMCLUSTER_STATE="/var/tmp/simcluster-conf.$$"
export SIMHCAD SIMHCA_LIBDIR
unset SIMHCA_INSTANCE   # node daemons use the default name inside their own network namespace
extra_cleanup() {
    "$SIMCLUSTER" down > /dev/null 2>&1 || "$SIMCLUSTER" clean > /dev/null 2>&1
    rm -rf "$SIMCLUSTER_STATE"
}

# cluster_up NODES SLOTS [UP OPTIONS...]: nodeA, nodeB, ... each with its simhcad; exits with FAIL when that
# fails.
cluster_up() {
    _n=$1 _s=$2
    shift 2
    if ! timeout 120 "$SIMCLUSTER" up --nodes "$_n" --slots "$_s" "$@" > "$scratch/up.log" 2>&1; then
        echo "FAIL: $me: simcluster up failed:"; tail -20 "$scratch/up.log"
        exit 1
    fi
    PROBE_PREFIX="$SIMCLUSTER exec nodeA"
}
on() { node=$1; shift; "$SIMCLUSTER" exec "$node" "$@"; }

# Is TCP port $2 listening inside node $1?
listening_in() {
    hex=$(printf '%04X' "$2")
    on "$1" cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }'
}
# wait_listening_in NODE PORT PID: until something listens on PORT in NODE, at most 10 s, or PID is gone.
wait_listening_in() {
    _i=0
    while ! listening_in "$1" "$2" && [ $_i -lt 50 ] && kill -0 "$3" 2>/dev/null; do _i=$((_i + 1)); sleep 0.2; done
}

# pair LABEL SECONDS CLIENTS TOOL ARGS...: TOOL ARGS -p PORT on nodeA, CLIENTS x (TOOL ARGS -p PORT nodeA)
# on nodeB (rdma-core's and perftest's server/client convention); passes when every one exits 0.
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
        wait_listening_in nodeA $port "$spid"
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

# expect_no_objects_in NODE...: every node's HCA holds nothing (the kernel's cleanup of closed uverbs files).
expect_no_objects_in() {
    for node in "$@"; do
        on "$node" "$SIMHCA_CTL" status > "$scratch/status.$node" 2>&1
        hca_is_empty "$(sed -n 2p "$scratch/status.$node")"
        result "no object left in $node's HCA" $? "$scratch/status.$node"
    done
}
