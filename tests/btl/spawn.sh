#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Dynamic processes over xrc alone (btl self,xrc; btl_xrc_other_jobs, on by default, named anyway), one node:
# 2 parents MPI_Comm_spawn 2 children (tests/mpi/spawn.c). Parents and children are different jobs with different
# XRC domains, so every parent <-> child message crosses a connection of its own (xrc::JobManagers), made through
# the connection managers even on one node; nothing else could carry them (no sm, no tcp). Checked: every message
# verified both ways, the children among themselves, MPI_Comm_disconnect; every process made a connection to the
# other job and sent over xrc (counters); with the parents alive and the children gone, the HCA holds nothing of
# the children (one XRC domain, the parents' SRQs, no TGT QP but the parents' loopback ones); no child's
# MPI_Finalize waits for its parents (alive and progressing) to close; then nothing at all after the job.
. "$(dirname "$0")/common.sh"
start_daemon
[ -x "$MPI/spawn" ] || { fail "spawn not built at $MPI/spawn"; finish; }
out=$work/spawn.out
release=$work/release
rm -f "$out" "$release"
# Open MPI 5's launcher (PRRTE) starts spawned children without mpirun's -x variables: what they need (the
# software HCA's library, the BTL's parameters) is in mpirun's own environment too, which they inherit.
LD_LIBRARY_PATH="$SIMHCA_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OMPI_MCA_btl=self,xrc \
    OMPI_MCA_btl_xrc_other_jobs=1 OMPI_MCA_btl_xrc_verbose=10 \
    SPAWN_CHILDREN=2 SPAWN_HOLD_FILE=$release xrun "$out" -x SPAWN_CHILDREN -x SPAWN_HOLD_FILE -np 2 \
    --mca btl self,xrc --mca btl_xrc_other_jobs 1 --mca btl_xrc_verbose 10 "$MPI/spawn" &
job=$!
t0=$SECONDS
gone=0
for _ in $(seq 1200); do
    grep -q '^spawn: children gone' "$out" 2>/dev/null && { gone=1; break; }
    kill -0 $job 2>/dev/null || break
    sleep 0.1
done
if [ $gone = 1 ]; then
    echo "  children gone after $((SECONDS - t0)) s"
    # the children report their counters at their MPI_Finalize, after the disconnect that let the parents go on
    for _ in $(seq 300); do
        [ "$(counters_modules "$out")" -ge 2 ] && break
        sleep 0.1
    done
    echo "  children's counters after $((SECONDS - t0)) s"
    # what the HCA holds once the children's processes are gone (their objects go when their files close)
    for _ in $(seq 100); do
        "$SIMHCA_CTL" list --json >"$work/list.json" 2>&1
        held=$(/usr/bin/python3 - "$work/list.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
qps = d.get("qp_list", [])
count = lambda t: sum(1 for q in qps if q["type"] == t)
print(d.get("xrcds"), count("XRC_INI"), count("XRC_TGT"), count("UD"), len(d.get("srq_list", [])))
PY
)
        read -r xrcds ini tgt ud srqs <<<"$held"
        [ "$xrcds" = 1 ] && [ "$ud" = 2 ] && break
        sleep 0.2
    done
    # The parents alone: their domain, 3 SRQs and a UD QP each, and their loopback pairs; no object of a child.
    if [ "$xrcds" = 1 ] && [ "$ud" = 2 ] && [ "$srqs" = 6 ] && [ "$tgt" -le 2 ]; then
        pass "children gone, parents alive: $xrcds XRC domain, $ud UD QPs, $srqs SRQs, $ini INI QPs, $tgt TGT QPs"
    else
        fail "children gone, parents alive: XRCDs=$xrcds UD=$ud SRQs=$srqs INI=$ini TGT=$tgt"
        head -c 3000 "$work/list.json"; echo
    fi
    child_sent=$(counter_nonzero "$out" bytes_sent)
    [ "$child_sent" = 2 ] && pass "both children sent over xrc" || fail "$child_sent of 2 children sent over xrc"
else
    fail "the parents never said the children were gone"
fi
touch "$release"
wait $job
status=$?
echo "  job over after $((SECONDS - t0)) s"
if [ $status -eq 0 ] && grep -q '^spawn: OK parents=2 children=2 errors=0' "$out" && ! sanitizer_report "$out"; then
    pass "$(grep '^spawn: OK' "$out")"
else
    fail "spawn (exit $status)"
    grep -av '^\[.*\] \[ *[0-9]*\]' "$out" | grep -av 'btl:xrc: .*counters:' | tail -30 | sed 's/^/    /'
    cp "$out" "$BTL_XRC_BUILDDIR/tests/btl/spawn.out"  # the whole output, for whoever looks into it
fi
# Parents and children over xrc both ways: every process made a connection to the other job through its connection
# manager (on one node a job's own traffic takes the loopback pair, which needs none) and sent over xrc.
lines=$(counters_modules "$out")
made=$(counter_nonzero "$out" connection_attempts)
sent=$(counter_nonzero "$out" bytes_sent)
if [ "$lines" = 4 ] && [ "$made" = 4 ] && [ "$sent" = 4 ]; then
    pass "all 4 processes connected to the other job (connection_attempts: $(counter "$out" connection_attempts | paste -sd' ')) and sent over xrc"
else
    fail "counters: $lines processes reported, $made made connections, $sent sent"
fi
# Open MPI does not call del_procs at MPI_Comm_disconnect: the parents keep their connections toward the children's
# job (their INI QPs) until their own MPI_Finalize. Said here, for whoever reads the log.
echo "  processes that saw the other job leave (del_procs): $(grep -c 'btl:xrc: .*job [0-9]* left' "$out")"
# The parents are alive and progress (MPI_Iprobe) while the children finalize: each child tells them LEAVING as soon
# as its own sends drained, and they answer at once; no child waits out btl_xrc_finalize_peer_wait for them.
if grep -q "told other jobs' senders that this process leaves" "$out" &&
    ! grep -q 'leaving MPI_Finalize after waiting .*: job [0-9]* rank' "$out"; then
    pass "the children told their parents LEAVING at once and did not wait out btl_xrc_finalize_peer_wait"
else
    fail "a child's finalize waited for its parents: $(grep -m1 'leaving MPI_Finalize after waiting' "$out")"
fi
expect_no_objects "spawn"
finish
