#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise), the software HCA, Slurm and munge. xrc-status, run on each node of a running
# job, lists what the job's processes hold there according to their own status records, and that is exactly what
# the node's HCA holds (simhca-ctl list --json: the same INI, TGT and UD QPs in the same states, the same processes
# holding each TGT QP, the same SRQs and XRC domain); after the job it lists nothing. Jobs:
#   - mpirun (ORTE's session directories), self,vader,xrc on 1+2+2 ranks: eager wire-up, handles on TGT QPs;
#   - srun --mpi=pmix (Slurm's session directories) on 2+1 ranks;
#   - mpirun with btl_xrc_xrcd_dir (xrc-status --dir), self,xrc on demand on 2+1 ranks (on-node traffic through the
#     loopback pair); then one process is killed with SIGKILL: its record is listed as stale (exit status 1), and
#     malformed files next to it are reported, not fatal.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
. "$(dirname "$0")/slurm-common.sh"
[ -x "$XRC_STATUS" ] || die "xrc-status is not built at $XRC_STATUS"

out=$("$XRC_STATUS" --help) && grep -q '^Usage: xrc-status' <<<"$out" || die "xrc-status --help"
"$XRC_STATUS" --no-such-option >/dev/null 2>&1
[ $? = 2 ] || die "xrc-status with an unknown option does not exit with status 2"

up_slurm 3 2

# held_job OUTPUT HOSTS XRC-STATUS-ARGS -- LAUNCH...: starts the hold job (LAUNCH writes its output to OUTPUT as it
# runs), waits until every pair is connected, then compares the listing with the HCA on each node of HOSTS; the
# job stays held until $WORKDIR/release exists.
held_job() {
    local output=$1 hosts=$2 args=$3 spec
    shift 4
    rm -f "$WORKDIR/release" "$output"
    "$@" &
    JOB=$!
    wait_for_line "$output" '^hold: connected .*errors=0' 60 ||
        { touch "$WORKDIR/release"; wait $JOB; die "the job did not connect: $(cat "$output")"; }
    for spec in ${hosts//,/ }; do
        # shellcheck disable=SC2086
        expect_status_matches_hca "${spec%:*}" $args
    done
}

# 1. mpirun: records found in ORTE's session directories (ompi.<host>.<uid>/...).
hosts=nodeA:1,nodeB:2,nodeC:2
HOLD_FILE="$WORKDIR/release" XRC_MPIRUN_ARGS="-x HOLD_FILE" \
    held_job "$WORKDIR/mpirun.out.raw" "$hosts" "" -- xrc_run "$WORKDIR/mpirun.out" "$hosts" self,vader,xrc "$MPI_DIR/hold"
table=$(sc exec nodeB "$XRC_STATUS") || die "xrc-status (table) on nodeB: status $?"
grep -q '^nodeB: 1 job, 2 btl xrc processes$' <<<"$table" && grep -q 'TGT QPs: 3 ' <<<"$table" ||
    die "xrc-status's table on nodeB: $table"
# Read whole before it is searched: `grep -q` on the pipe would stop reading at the first match, and under pipefail
# the writer's SIGPIPE (more rows were still to come) would fail the pipeline though the row was there.
counters=$(sc exec nodeB "$XRC_STATUS" --counters) || die "xrc-status --counters on nodeB: status $?"
grep -qE '^ +cm_datagrams_sent +[0-9]+ +[0-9]+$' <<<"$counters" ||
    die "xrc-status --counters on nodeB does not list every counter per rank: $counters"
touch "$WORKDIR/release"
wait $JOB || die "the mpirun job failed"
for node in nodeA nodeB nodeC; do expect_status_empty $node; done
info "after the mpirun job: nothing listed on nodeA nodeB nodeC"

# 2. srun: records found in Slurm's session directories (spmix_appdir_<uid>_<job>.<step>).
hosts=nodeA:2,nodeB:1
OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,xrc SRUN_ENV="HOLD_FILE=$WORKDIR/release" \
    held_job "$WORKDIR/srun.out" "$hosts" "" -- srun_sim "$WORKDIR/srun.out" "$hosts" "$MPI_DIR/hold"
grep -q spmix_appdir "$WORKDIR/nodeA.status.json" || die "the srun job's records are not in Slurm's session directory"
touch "$WORKDIR/release"
wait $JOB || die "the srun job failed"
for node in nodeA nodeB; do expect_status_empty $node; done
info "after the srun job: nothing listed on nodeA nodeB"

# 3. btl_xrc_xrcd_dir: records next to the XRC domain file there (each node's own /tmp), found with --dir.
dir=/tmp/xrc-status-test
for node in nodeA nodeB; do sc exec $node mkdir -p $dir || die "mkdir $dir on $node"; done
hosts=nodeA:2,nodeB:1
HOLD_FILE="$WORKDIR/release" \
    XRC_MPIRUN_ARGS="-x HOLD_FILE --mca btl_xrc_xrcd_dir $dir --mca btl_xrc_connect on-demand" \
    held_job "$WORKDIR/xrcd-dir.out.raw" "$hosts" "--dir $dir" -- xrc_run "$WORKDIR/xrcd-dir.out" "$hosts" self,xrc "$MPI_DIR/hold"
grep -q '"state":"loopback"' "$WORKDIR/nodeA.status.json" || die "no loopback pair listed on nodeA (self,xrc)"
victim=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["jobs"][0]["processes"][0]["pid"])' \
    "$WORKDIR/nodeB.status.json") || die "no process listed on nodeB"
sc exec nodeB kill -KILL "$victim" || die "cannot kill pid $victim on nodeB"
wait $JOB && die "the job went on after one of its processes was killed"
out=$(sc exec nodeB "$XRC_STATUS" --dir $dir)
[ $? = 1 ] || die "xrc-status does not exit with status 1 for a stale record: $out"
grep -qE "^  2 +$victim .*stale: the process is gone" <<<"$out" || die "the killed process is not listed as stale: $out"
info "nodeB after SIGKILL of rank 2 (pid $victim): $(grep -E "^  2 +$victim" <<<"$out" | tr -s ' ')"
# Malformed files next to it: a foreign one and a record cut short are reported with their reason.
record=$(sc exec nodeB bash -c "ls $dir/btl_xrc_status.*") || die "no record left on nodeB"
sc exec nodeB bash -c "echo not a record >$dir/btl_xrc_status.1.0.7 && head -c 200 $record >$dir/btl_xrc_status.1.0.8" ||
    die "cannot write malformed records on nodeB"
out=$(sc exec nodeB "$XRC_STATUS" --dir $dir --json)
[ $? = 1 ] || die "xrc-status with malformed records does not exit with status 1"
/usr/bin/python3 - "$out" <<'PY' || die "malformed records: $out"
import json, sys
d = json.loads(sys.argv[1])
errors = {p["path"].rsplit("/", 1)[1]: p["error"] for p in d["problems"]}
assert "not a btl-xrc status record" in errors["btl_xrc_status.1.0.7"], errors
assert "cut short" in errors["btl_xrc_status.1.0.8"], errors
assert [p["record"] for p in d["jobs"][0]["processes"]] == ["stale"], d["jobs"]
print("problems:", errors)
PY
expect_no_objects
info "PASS"
