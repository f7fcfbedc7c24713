# SPDX-License-Identifier: BSD-3-Clause
# Helpers of the Slurm tests on the simulated cluster (sourced after common.sh and xrc-common.sh): jobs started
# with `srun --mpi=pmix` inside the head node, MCA parameters given as OMPI_MCA_* (as Slurm users do), and the
# check that no munge or Slurm daemon outlives the cluster.
SRUN_TIMEOUT=${SRUN_TIMEOUT:-120}
for c in slurmctld slurmd srun munged; do
    command -v "$c" >/dev/null || die "$c is missing: install Slurm and munge with scripts/install-deps"
done

# up_slurm N P: the cluster with Slurm (P CPUs per node); remembers the daemons to check they are gone later
up_slurm() {
    up_cluster "$1" "$2" --slurm
    SLURM_DAEMONS=$(cat "$SIMCLUSTER_STATE/slurm/daemons") || die "no Slurm daemon record"
    [ "$(wc -l <<<"$SLURM_DAEMONS")" = $(($1 + 2)) ] || die "expected munged, slurmctld and $1 slurmd: $SLURM_DAEMONS"
    info "slurm daemons: $(awk '{ printf "%s@%s(%s) ", $3, $2, $1 }' <<<"$SLURM_DAEMONS")"
}

# task_list nodeA:1,nodeB:2 -> nodeA,nodeB,nodeB (srun -m arbitrary -w: task i runs on the i-th name)
task_list() {
    tr ',' '\n' <<<"$1" | awk -F: '{ for (i = 0; i < $2; ++i) printf "%s%s", (n++ ? "," : ""), $1 }'
}

# srun_sim OUT HOSTS PROGRAM [ARGS...]: one job of HOSTS (nodeA:2,nodeB:2) tasks through srun --mpi=pmix inside
# the head node, bounded by a timeout; stdout+stderr go to OUT and our log. Sets JOB_WALL (seconds, the job as
# srun ran it: allocation, launch, MPI_Init ... MPI_Finalize). Extra environment: SRUN_ENV (VAR=VALUE words).
srun_sim() {
    local out=$1 hosts=$2 tasks rc t0
    shift 2
    tasks=$(task_list "$hosts")
    info "srun --mpi=pmix -m arbitrary -w $tasks $* ${SRUN_ENV:+(env ${SRUN_ENV})}"
    t0=$EPOCHREALTIME
    # shellcheck disable=SC2086
    sc run env ${SRUN_ENV:-} timeout -k 5 "$SRUN_TIMEOUT" srun --mpi=pmix -m arbitrary -w "$tasks" \
        -n "$(tr ',' '\n' <<<"$tasks" | wc -l)" "$@" >"$out" 2>&1 </dev/null &
    wait $!
    rc=$?
    JOB_WALL=$(awk -v a="${t0/,/.}" -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.2f", b - a }')
    cat "$out"
    [ $rc = 124 ] && info "srun timed out after ${SRUN_TIMEOUT}s"
    return $rc
}

# assert_slurm_gone: every munged/slurmctld/slurmd recorded by up_slurm has exited (by pid: a zombie has
# exited, and a new process that took the pid runs another command)
assert_slurm_gone() {
    local p n c ns left=""
    while read -r p n c ns; do
        [ -d "/proc/$p" ] && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$c" ] &&
            [ "$(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null)" != Z ] && left+=" $c@$n($p)"
    done <<<"$SLURM_DAEMONS"
    [ -z "$left" ] || die "Slurm daemons still running after simcluster down:$left"
    info "no munge or Slurm daemon left (checked by pid: $(awk '{ printf "%s ", $1 }' <<<"$SLURM_DAEMONS"))"
}
