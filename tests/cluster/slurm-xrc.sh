#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise), the software HCA, Slurm and munge. Jobs launched by Slurm
# (`srun --mpi=pmix`, Slurm's default settings, MCA parameters through OMPI_MCA_*) over btl xrc, on 2x2 and on
# three nodes with 1, 2 and 3 ranks: allpairs (every pair, 0 B .. 4 MiB, verified, per-node layout), collectives
# and osc/rdma one-sided, all checked; every node's HCA holds 0 objects after each job; each job's wall time and
# the ACK timeouts it cost (port counters read before and after) are reported. The check that no job spends an
# ACK timeout is slurm-xrc-ack-timeouts.sh, which reads the record this test writes. One more job with
# SLURM_PMIX_FENCE=ring (the workaround for Slurm's fence, README) must spend none, and after `simcluster down`
# no munge or Slurm daemon and no process of the cluster is left.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
. "$(dirname "$0")/slurm-common.sh"
RECORD=${SLURM_ACK_RECORD:-$PWD/$T.acks}
: >"$RECORD" || die "cannot write $RECORD"

up_slurm 3 3
record_ns
# A second `up --slurm` with the same shape changes nothing: the same daemons keep running.
sc up --nodes 3 --slots 3 --slurm >/dev/null || die "a second simcluster up --slurm failed"
[ "$(cat "$SIMCLUSTER_STATE/slurm/daemons")" = "$SLURM_DAEMONS" ] || die "a second up --slurm changed the daemons"
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,xrc

# job NAME HOSTS OK-REGEX PROGRAM [ARGS...]: one checked job, its wall time and ACK timeouts into the record
job() {
    local name=$1 hosts=$2 ok=$3 before after
    shift 3
    before=$(ack_timeouts)
    srun_sim "$WORKDIR/out" "$hosts" "$@" || die "$name on $hosts failed"
    expect_line "$WORKDIR/out" "$ok" "$name $hosts"
    expect_no_objects
    after=$(ack_timeouts)
    ACKS=$((${after##* } - ${before##* }))
    info "$name $hosts: wall ${JOB_WALL} s, ACK timeouts spent: $ACKS (before: $before; after: $after)"
    echo "job=$name hosts=$hosts${SRUN_ENV:+ env=${SRUN_ENV// /,}} wall=$JOB_WALL ack_timeouts=$ACKS" >>"$RECORD"
}

for hosts in nodeA:2,nodeB:2 nodeA:1,nodeB:2,nodeC:3; do
    job allpairs "$hosts" '^allpairs: OK .*errors=0' "$ALLPAIRS" --expect "$hosts"
    job collectives "$hosts" '^collectives: OK .*errors=0' "$MPI_DIR/collectives"
    OMPI_MCA_osc=rdma OMPI_MCA_osc_rdma_btls=xrc job onesided "$hosts" '^onesided: OK .*errors=0' "$MPI_DIR/onesided"
done
echo "complete" >>"$RECORD"

# The workaround on Slurm before the fence became a barrier: the ring fence waits for every node.
SRUN_ENV="SLURM_PMIX_FENCE=ring" job allpairs nodeA:1,nodeB:2,nodeC:3 '^allpairs: OK .*errors=0' "$ALLPAIRS" \
    --expect nodeA:1,nodeB:2,nodeC:3
[ "$ACKS" = 0 ] || die "with SLURM_PMIX_FENCE=ring the job still spent $ACKS ACK timeouts"
info "SLURM_PMIX_FENCE=ring: no ACK timeout"

sc down >/dev/null || die "simcluster down failed"
assert_slurm_gone
assert_gone
assert_ns_gone
info "PASS"
