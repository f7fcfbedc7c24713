# Helpers of the btl xrc tests on the simulated cluster (sourced after common.sh). They need root and the
# software HCA; the plugin is loaded from the build tree (components/) next to Open MPI's own components.
MPI_DIR=$TOP_BUILDDIR/tests/mpi
SIMHCA_CTL=${SIMHCA_CTL:-$TOP_BUILDDIR/src/simhca/simhca-ctl}
[ -n "${SIMHCAD:-}" ] && [ -x "$SIMHCAD" ] || skip "the software HCA (simhcad) is not built"
[ -e "$TOP_BUILDDIR/components/mca_btl_xrc.so" ] || fail "the plugin is not built ($TOP_BUILDDIR/components)"
export OMPI_MCA_mca_base_component_path="$TOP_BUILDDIR/components:${OMPI_PKGLIBDIR:?}"

# xrc_run OUT HOSTS BTLS PROGRAM [ARGS...] [-- extra mpirun args are given through XRC_MPIRUN_ARGS]
xrc_run() {
    local out=$1 hosts=$2 btls=$3
    shift 3
    # shellcheck disable=SC2086
    mpirun_sim "$out" --mca pml ob1 --mca btl "$btls" ${XRC_MPIRUN_ARGS:-} --host "$hosts" "$@"
}

# expect_line OUT REGEX WHAT: the job printed its verified result line
expect_line() {
    grep -qE "$2" "$1" || fail "$3: no line matching '$2'"
    info "$3: $(grep -E "$2" "$1" | head -1)"
}

# Every node's HCA holds nothing once the jobs are over (the kernel's cleanup of a closed uverbs file).
expect_no_objects() {
    local node status
    for node in $SIMCLUSTER_NODES_LIST; do
        status=$(sc exec "$node" "$SIMHCA_CTL" status 2>&1 | sed -n 2p)
        [ "$status" = "clients 0 pds 0 mrs 0 cqs 0 srqs 0 xrcds 0 qps 0" ] ||
            fail "$node's HCA still holds objects after the jobs: $status"
    done
    info "no object left in any node's HCA ($SIMCLUSTER_NODES_LIST)"
}

# up_cluster N P [UP-ARGS...]: a cluster with the software HCA, and the list of its nodes
up_cluster() {
    local n=$1 p=$2
    shift 2
    sc up --nodes "$n" --slots "$p" "$@" || fail "simcluster up failed"
    SIMCLUSTER_NODES_LIST=$(hosts_spec "$n" 1 | tr ',' '\n' | cut -d: -f1 | tr '\n' ' ')
}

# ack_timeouts: "nodeA=N nodeB=N ..." and the total last: how often each node's HCA retransmitted after an ACK
# timeout so far (the port counter hw_counters/local_ack_timeout_err, read from sysfs as on a real HCA). What
# the fabric saw, not what a clock suggests: read it before and after a job.
ack_timeouts() {
    local node v total=0 line=""
    for node in $SIMCLUSTER_NODES_LIST; do
        v=$(sc exec "$node" bash -c 'cat "$SYSFS_PATH"/class/infiniband/*/ports/*/hw_counters/local_ack_timeout_err' |
            awk '{ s += $1 } END { print s + 0 }') || fail "cannot read $node's local_ack_timeout_err"
        line+="$node=$v "
        total=$((total + v))
    done
    echo "$line$total"
}
