# SPDX-License-Identifier: BSD-3-Clause
# Helpers of the btl xrc tests on the simulated cluster (sourced after common.sh). They need root and the
# software HCA; the plugin is loaded from the build tree (components/) next to Open MPI's own components.
MPI_DIR=$TOP_BUILDDIR/tests/mpi
SIMHCA_CTL=${SIMHCA_CTL:-$TOP_BUILDDIR/src/simhca/simhca-ctl}
[ -n "${SIMHCAD:-}" ] && [ -x "$SIMHCAD" ] || skip "the software HCA (simhcad) is not built"
[ -e "$TOP_BUILDDIR/components/mca_btl_xrc.so" ] || die "the plugin is not built ($TOP_BUILDDIR/components)"
export OMPI_MCA_mca_base_component_path="$TOP_BUILDDIR/components:${OMPI_PKGLIBDIR:?}"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/hca.sh"   # hca_is_empty (simcluster starts the nodes' daemons)
. "$(dirname "${BASH_SOURCE[0]}")/../lib/counters.sh"   # counter, counter_sum, ... (run with btl_xrc_verbose 10)

# xrc_run OUT HOSTS BTLS PROGRAM [ARGS...] [-- extra mpirun args are given through XRC_MPIRUN_ARGS]
xrc_run() {
    local out=$1 hosts=$2 btls=$3
    shift 3
    # shellcheck disable=SC2086
    mpirun_sim "$out" --mca pml ob1 --mca btl "$btls" ${XRC_MPIRUN_ARGS:-} --host "$hosts" "$@"
}

# expect_line OUT REGEX WHAT: the job printed its verified result line
expect_line() {
    grep -aqE "$2" "$1" || die "$3: no line matching '$2'"
    info "$3: $(grep -aE "$2" "$1" | head -1)"
}

# colls_and_onesided HOSTS WHAT [MPIRUN-ARGS...]: the verified collectives, then one-sided over osc/rdma with xrc as
# the RDMA BTL for every peer, on HOSTS with these extra mpirun arguments; WHAT ends the result lines' labels.
colls_and_onesided() {
    local hosts=$1 what=$2
    shift 2
    XRC_MPIRUN_ARGS="$*" \
        xrc_run "$WORKDIR/out" "$hosts" self,vader,xrc "$MPI_DIR/collectives" || die "collectives on $hosts failed"
    expect_line "$WORKDIR/out" '^collectives: OK .*errors=0' "collectives $hosts$what"
    XRC_MPIRUN_ARGS="${*:+$* }--mca osc rdma --mca osc_rdma_btls xrc" \
        xrc_run "$WORKDIR/out" "$hosts" self,vader,xrc "$MPI_DIR/onesided" || die "onesided on $hosts failed"
    expect_line "$WORKDIR/out" '^onesided: OK .*errors=0' "onesided $hosts$what"
}

# Every node's HCA holds nothing once the jobs are over (the kernel's cleanup of a closed uverbs file).
expect_no_objects() {
    local node status
    for node in $SIMCLUSTER_NODES_LIST; do
        status=$(sc exec "$node" "$SIMHCA_CTL" status 2>&1 | sed -n 2p)
        hca_is_empty "$status" ||
            die "$node's HCA still holds objects after the jobs: $status"
    done
    info "no object left in any node's HCA ($SIMCLUSTER_NODES_LIST)"
}

# up_cluster N P [UP-ARGS...]: a cluster with the software HCA, and the list of its nodes. XRC_TEST_RAILS=R in the
# environment gives a test written for one rail R rails (one device with R ports) unless it asks for a shape of its
# own: with OMPI_MCA_btl_xrc_rail_failover=1 that runs the single-rail tests through the failover send path (the
# tests that count modules or name simhca0:1 expect one rail and may then fail on those counts alone).
up_cluster() {
    local n=$1 p=$2 rails=()
    shift 2
    [[ -n "${XRC_TEST_RAILS:-}" && " $* " != *" --rails "* ]] && rails=(--rails "$XRC_TEST_RAILS")
    sc up --nodes "$n" --slots "$p" "${rails[@]}" "$@" || die "simcluster up failed"
    SIMCLUSTER_NODES_LIST=$(cluster_nodes | head -n "$n" | paste -sd' ')
}

# ack_timeouts: "nodeA=N nodeB=N ..." and the total last: how often each node's HCA retransmitted after an ACK
# timeout so far (the port counter hw_counters/local_ack_timeout_err, read from sysfs as on a real HCA). What
# the fabric saw, not what a clock suggests: read it before and after a job.
ack_timeouts() {
    local node v total=0 line=""
    for node in $SIMCLUSTER_NODES_LIST; do
        v=$(sc exec "$node" bash -c 'cat "$SYSFS_PATH"/class/infiniband/*/ports/*/hw_counters/local_ack_timeout_err' |
            awk '{ s += $1 } END { print s + 0 }') || die "cannot read $node's local_ack_timeout_err"
        line+="$node=$v "
        total=$((total + v))
    done
    echo "$line$total"
}

# osc_rdma_setup: OMPI_INFO (of the Open MPI that runs the tests), OMPI_HAS_OPENIB (1 when it has the openib BTL,
# the comparison on the same HCA; 5.0 has none) and OSC_DYNAMIC_BLOCKER, why dynamic windows cannot run over
# osc/rdma here (empty: they can). The osc/rdma of Open MPI 4.1.1 to 4.1.4 deadlocks on the first
# access to a remote peer of a dynamic window, whatever the BTL (docs/onesided.md). OSC_RDMA_COMPONENT_DIR, a
# directory with an osc/rdma built with the upstream fix (scripts/osc-rdma-with-fix), goes first in the component
# path.
osc_rdma_setup() {
    local version
    OMPI_INFO=$(dirname "$(command -v "$MPIRUN")")/ompi_info
    version=$("$OMPI_INFO" --parsable 2>/dev/null | sed -n 's/^ompi:version:full://p')
    OMPI_HAS_OPENIB=0
    # Read whole, then searched: grep -q stopping at its match would end ompi_info with SIGPIPE (pipefail).
    grep -q '^mca:btl:openib:' <<<"$("$OMPI_INFO" --parsable 2>/dev/null)" && OMPI_HAS_OPENIB=1
    OSC_DYNAMIC_BLOCKER=""
    if [ -n "${OSC_RDMA_COMPONENT_DIR:-}" ]; then
        [ -e "$OSC_RDMA_COMPONENT_DIR/mca_osc_rdma.so" ] ||
            die "no mca_osc_rdma.so in OSC_RDMA_COMPONENT_DIR=$OSC_RDMA_COMPONENT_DIR"
        export OMPI_MCA_mca_base_component_path="$OSC_RDMA_COMPONENT_DIR:$OMPI_MCA_mca_base_component_path"
        info "osc/rdma from $OSC_RDMA_COMPONENT_DIR (Open MPI $version)"
        return
    fi
    case "$version" in
    4.1.[1-4]) OSC_DYNAMIC_BLOCKER="Open MPI $version's osc/rdma deadlocks on dynamic windows" ;;
    esac
    [ -z "$OSC_DYNAMIC_BLOCKER" ] && return
    OSC_DYNAMIC_BLOCKER+=" (ompi_osc_rdma_find_dynamic_region holds the peer's regions_lock exclusively, then"
    OSC_DYNAMIC_BLOCKER+=" ompi_osc_rdma_refresh_dynamic_region waits for it shared; fixed in 4.1.5 by"
    OSC_DYNAMIC_BLOCKER+=" open-mpi/ompi#10518, in 5.0 by #10473); set OSC_RDMA_COMPONENT_DIR to run them"
}

# expect_xrc_one_sided OUT RANKS WHAT: every rank's xrc modules posted one-sided operations (its counters at
# finalize, btl_xrc_verbose 10), so osc/rdma really ran over xrc. A rank has one module per rail: it counts once,
# busy when one of its modules is.
expect_xrc_one_sided() {
    local lines busy
    lines=$(counters_lines "$1" | grep -oE ' rank=[0-9]+ ' | sort -u | wc -l)
    busy=$(paste <(counters_lines "$1" | grep -oE ' rank=[0-9]+ ') <(counter "$1" rdma_reads) \
        <(counter "$1" rdma_writes) <(counter "$1" atomics) | awk '$2 + $3 + $4 > 0 { print $1 }' | sort -u | wc -l)
    [ "$lines" = "$2" ] && [ "$busy" = "$2" ] || die "$3: $busy of $2 ranks show one-sided operations over xrc"
}

# xrc-status (src/xrc-status): what a node's btl xrc processes say they hold, from their status records.
XRC_STATUS=${XRC_STATUS:-$TOP_BUILDDIR/src/xrc-status/xrc-status}

# wait_for_line FILE REGEX [SECONDS]: until a line of FILE (a job's output, still being written) matches; status 1
# when none did within SECONDS (default 60)
wait_for_line() {
    local i
    for ((i = 0; i < ${3:-60} * 10; i++)); do
        grep -qE "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# status_vs_hca NODE [XRC-STATUS ARGS...]: xrc-status --json on NODE lists exactly the QPs, SRQs and XRC domain that
# NODE's HCA holds (tests/cluster/status_vs_hca.py), every process alive; prints what differs otherwise (status 1).
# The listings are kept in $WORKDIR/NODE.{status,hca}.json.
status_vs_hca() {
    local node=$1
    shift
    sc exec "$node" "$XRC_STATUS" --json "$@" >"$WORKDIR/$node.status.json" 2>&1 || {
        echo "xrc-status on $node exited with status $?: $(head -c 400 "$WORKDIR/$node.status.json")"
        return 1
    }
    sc exec "$node" "$SIMHCA_CTL" list --json >"$WORKDIR/$node.hca.json" 2>&1 || return 1
    /usr/bin/python3 "$TOP_SRCDIR/tests/cluster/status_vs_hca.py" "$WORKDIR/$node.status.json" \
        "$WORKDIR/$node.hca.json" --expect-jobs 1
}

# expect_status_matches_hca NODE [XRC-STATUS ARGS...]: status_vs_hca holds within 20 s (a process rewrites its
# record at the end of the progress call in which a connection event happened: right after it, not at once)
expect_status_matches_hca() {
    local node=$1 i out
    shift
    for ((i = 0; i < 100; i++)); do
        out=$(status_vs_hca "$node" "$@") && { info "$node: xrc-status $*: $out"; return 0; }
        sleep 0.2
    done
    die "$node: xrc-status does not list what the HCA holds: $out"
}

# expect_status_empty NODE [XRC-STATUS ARGS...]: xrc-status on NODE lists no process and no problem (exit status 0)
expect_status_empty() {
    local node=$1 out
    shift
    out=$(sc exec "$node" "$XRC_STATUS" "$@" 2>&1) || die "$node: xrc-status $* exited with status $? after the job: $out"
    [ "$out" = "$node: no btl xrc process" ] || die "$node: xrc-status $* still lists something after the job: $out"
}

# fault_ends_held_job NAME NODE FAULT UNDO EXPECT: the hold program (tests/mpi/hold.c) on nodeA:1,nodeB:1, with the
# extra mpirun arguments of XRC_MPIRUN_ARGS; once every pair is connected, `simhca-ctl fault FAULT` on NODE's HCA,
# then the hold is released. The job must end with an error status (not the timeout), no process may crash, and a
# line of its output must match EXPECT (the message naming what failed). UNDO: the fault arguments that take FAULT
# back once the job is over ("" for none). FAULT and UNDO are split on spaces; a word @FUNC in FAULT is replaced by
# FUNC's output, run once the job is connected (the object to raise an event on exists only then). NAME labels the
# messages; the job's output is left in $WORKDIR/held.NAME (spaces as dashes).
fault_ends_held_job() {
    local name=$1 node=$2 undo=$4 expect=$5 out="$WORKDIR/held.${1// /-}" word fault=() job rc
    rm -f "$WORKDIR/release"
    MPIRUN_TIMEOUT=120 HOLD_FILE="$WORKDIR/release" XRC_MPIRUN_ARGS="-x HOLD_FILE ${XRC_MPIRUN_ARGS:-}" \
        xrc_run "$out" nodeA:1,nodeB:1 self,vader,xrc "$MPI_DIR/hold" &
    job=$!
    wait_for_line "$out.raw" '^hold: connected' 60 || { kill $job; wait $job; die "$name: the job never connected"; }
    for word in $3; do
        case $word in
        @*) word=$(${word#@}) ;;
        esac
        [ -n "$word" ] || { touch "$WORKDIR/release"; wait $job; die "$name: nothing on $node to inject '$3' on"; }
        # shellcheck disable=SC2206  # FUNC's output is several arguments
        fault+=($word)
    done
    sc exec "$node" "$SIMHCA_CTL" fault "${fault[@]}" >/dev/null || die "$name: injecting '${fault[*]}' on $node failed"
    touch "$WORKDIR/release"
    wait $job
    rc=$?
    # shellcheck disable=SC2086
    [ -z "$undo" ] || sc exec "$node" "$SIMHCA_CTL" fault $undo >/dev/null
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || die "$name (${fault[*]} on $node): the job did not end with an error (exit $rc)"
    grep -qiE 'segmentation fault|signal 11|core dumped' "$out" && die "$name: a process crashed"
    grep -qE "$expect" "$out" || die "$name (${fault[*]} on $node): no message matching '$expect'"
    info "$name (${fault[*]} on $node): exit $rc, $(grep -m1 -E "$expect" "$out")"
}

# rail_lost_mid_steady FAULT UNDO WHAT [MCA ARGS...]: tests/mpi/steady on nodeA:2,nodeB:2 (3 sizes, 16 numbered
# messages a round per pair) with rail failover on, verbose 10 and these extra MCA arguments; 0.5 s into the
# traffic the function FAULT kills a rail, 3 s later the job is stopped, then the function UNDO gives the rail back
# to the next test. The job must exit 0 with every message verified and every numbered one delivered once and in
# order; WHAT names the loss. The job's output is left in $WORKDIR/out. RAIL_TEST_BTLS: the BTLs (self,vader,xrc).
rail_lost_mid_steady() {
    local fault=$1 undo=$2 what=$3 job rc
    shift 3
    rm -f "$WORKDIR/stop" "$WORKDIR/out" "$WORKDIR/out.raw"
    (XRC_MPIRUN_ARGS="--mca btl_xrc_verbose 10 --mca btl_xrc_rail_failover 1 --mca btl_xrc_timeout 14 \
        --mca btl_xrc_finalize_wait 20 $*" xrc_run "$WORKDIR/out" nodeA:2,nodeB:2 "${RAIL_TEST_BTLS:-self,vader,xrc}" "$MPI_DIR/steady" 3 \
        "$WORKDIR/stop" 16) &
    job=$!
    wait_for_line "$WORKDIR/out.raw" '^steady: traffic' 60 || { wait $job; die "no traffic"; }
    sleep 0.5
    "$fault"
    sleep 3
    touch "$WORKDIR/stop"
    wait $job
    rc=$?
    "$undo"
    [ $rc = 0 ] || die "the job did not survive: $what (exit $rc)"
    expect_line "$WORKDIR/out" '^steady: OK .*errors=0' "steady 2x2, $what"
    expect_line "$WORKDIR/out" '^steady: stream messages=[1-9][0-9]* out_of_sequence=0' \
        "every numbered message delivered once and in order: $what"
}

# flapped_run OUT HOSTS ARGS SECONDS DOWN... : steady traffic on HOSTS with mpirun's ARGS (the transport, as words)
# for SECONDS at least and until the flaps are over: once it flows, nodeB's port (the ports of every node in
# FLAP_NODES, "nodeA nodeB": a switch that reboots; only port FLAP_PORT when set) goes down for each DOWN seconds
# in turn (1 s apart; FLAP_DOWN_FAULT=port-down-quiet: without its PORT_ERR event; with
# FLAP_ACKS_LOST_FIRST=S, nodeB's first loses every acknowledgement for S s, until it is back up),
# and the job runs on for FLAP_TRAFFIC_AFTER s (1 by default) after the last. Leaves the job's exit status in $rc (noflow: no
# traffic within 60 s; the job is then left to MPIRUN_TIMEOUT), the seconds from the last port-down to the job's
# end in $elapsed, and when the last port-up was done (seconds since the epoch) in $up_at.
flapped_run() {
    local out=$1 hosts=$2 args=$3 seconds=$4 down start
    shift 4
    # the output of an earlier run under the same name must not be taken for this one's traffic
    rm -f "$WORKDIR/stop" "$WORKDIR/ended" "$out" "$out.raw"
    (
        # shellcheck disable=SC2086  # the transport's arguments are words
        mpirun_sim "$out" $args --host "$hosts" "$MPI_DIR/steady" "$seconds" "$WORKDIR/stop" ${STEADY_BURST:-}
        status=$?
        date +%s.%N >"$WORKDIR/ended"
        exit $status
    ) &
    local job=$!
    if ! wait_for_line "$out.raw" '^steady: traffic' 60; then
        wait $job  # until MPIRUN_TIMEOUT stops it, so that nothing of it is left on the nodes
        rc=noflow elapsed=0
        return
    fi
    for down in "$@"; do
        sleep 1
        start=$(date +%s.%N)
        if [ -n "${FLAP_ACKS_LOST_FIRST:-}" ]; then
            sc exec nodeB "$SIMHCA_CTL" fault ack-drop >/dev/null || die "ack-drop failed"
            info "nodeB's port loses every acknowledgement for $FLAP_ACKS_LOST_FIRST s first"
            sleep "$FLAP_ACKS_LOST_FIRST"
        fi
        for node in ${FLAP_NODES:-nodeB}; do
            sc exec "$node" "$SIMHCA_CTL" fault "${FLAP_DOWN_FAULT:-port-down}" ${FLAP_PORT:+--port $FLAP_PORT} >/dev/null ||
                die "port-down failed"
        done
        info "${FLAP_NODES:-nodeB}: port down at $(date +%T.%N | cut -c1-12) for $down s"
        sleep "$down"
        up_at=$(date +%s.%N)  # the port comes up no earlier (the command takes a moment to reach the node)
        for node in ${FLAP_NODES:-nodeB}; do
            sc exec "$node" "$SIMHCA_CTL" fault "${FLAP_UP_FAULT:-port-up}" ${FLAP_PORT:+--port $FLAP_PORT} \
                >/dev/null || die "port-up failed"
        done
        if [ -n "${FLAP_ACKS_LOST_FIRST:-}" ]; then
            sc exec nodeB "$SIMHCA_CTL" fault ack-restore >/dev/null || die "ack-restore failed"
        fi
        info "${FLAP_NODES:-nodeB}: port up at $(date +%T.%N | cut -c1-12)"
    done
    sleep "${FLAP_TRAFFIC_AFTER:-1}"
    touch "$WORKDIR/stop"
    wait $job
    rc=$?
    elapsed=$(echo "$(cat "$WORKDIR/ended") - $start" | bc)
}

# every_port FAULT: simhca-ctl fault FAULT (port-down, port-up) on every port of nodeA and nodeB; when it fails, the
# caller's job ($job, stopped by $WORKDIR/stop) is stopped first.
every_port() {
    local node
    for node in nodeA nodeB; do
        sc exec "$node" "$SIMHCA_CTL" fault "$1" >/dev/null || { touch "$WORKDIR/stop"; wait $job; die "$1 failed"; }
    done
}
