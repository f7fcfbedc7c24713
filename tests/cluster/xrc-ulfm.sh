#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise), the software HCA and an Open MPI built with User-Level Failure Mitigation
# (Debian 13's 5.0.7: `mpirun --with-ft ulfm`; skipped elsewhere). A process dies and the job goes on
# (tests/mpi/ulfm.c): 3 nodes x 2 ranks, rank 5 kills itself (SIGKILL); the survivors, each blocked in a receive
# from it, learn of it (the receive fails), revoke, shrink, agree and run verified all-pairs messages, an allreduce
# and a one-sided epoch on the shrunken communicator, then finalize. Over self,sm,tcp first (the control: what Open
# MPI does with a transport it supports), then over self,sm,xrc (xrc carries every message between nodes).
# Afterwards no node's HCA holds an object of the job. Then over xrc again with the storm: the victim dies while
# the others send to it and, over the same connections, to its node-mate; its node refuses what still names it
# (at least one refusal is seen), and the node-mate must get each of its messages once, in order. Last, two ranks
# die at once on two nodes (2 and 4) during a storm. Between them, rank 5 dies in the middle of rendezvous sends to
# every survivor, and rank 4 as soon as MPI_Init has returned (connections on demand, then made eagerly). Last, the
# storm on two rails.
# ULFM_TEST_VICTIMS names other victims (comma-separated ranks, several die at once), ULFM_TEST_TRACE=1 has every
# survivor print each step it finished, ULFM_TEST_VERBOSE sets btl_xrc_verbose (1), ULFM_TEST_NODE_CRASH=1 adds the
# node crashes (below; by hand: Open MPI's runtime fails them now and then, over tcp too).
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"

OMPI_INFO=$(dirname "$(command -v "$MPIRUN")")/ompi_info
grep -q 'FT MPI support: yes' <<<"$("$OMPI_INFO" 2>/dev/null)" ||
    skip "this Open MPI has no User-Level Failure Mitigation (ompi_info: FT MPI support)"
[ -x "$MPI_DIR/ulfm" ] || die "ulfm not built at $MPI_DIR/ulfm (make -C tests/mpi ulfm)"
victims=${ULFM_TEST_VICTIMS:-5}

up_cluster 3 2
out=$WORKDIR/out
# run_ulfm BTLS: the job over BTLS (with $storm=1: the storm); how soon the survivors learned of the death
run_ulfm() {
    local btls=$1 killed learned
    XRC_MPIRUN_ARGS="--with-ft ulfm ${node_pid:+-x ULFM_NODE_PID=$node_pid }${hold_file:+-x ULFM_HOLD_FILE=$hold_file }-x ULFM_STORM=${storm:-0} -x ULFM_RNDV=${rndv:-0} -x ULFM_EARLY=${early:-0} ${connect:+--mca btl_xrc_connect $connect }-x ULFM_VICTIMS=$victims -x ULFM_ONESIDED=1 -x ULFM_TRACE=${ULFM_TEST_TRACE:-0} --mca btl_xrc_verbose ${ULFM_TEST_VERBOSE:-1}" \
        xrc_run "$out" nodeA:2,nodeB:2,nodeC:2 "$btls" "$MPI_DIR/ulfm" || {
        local rc=$?
        # A node crash: stopped by node_crash after the verdict (Open MPI's fence hangs, above).
        [ -n "${node_pid:-}" ] || die "over $btls the survivors did not finish cleanly (exit $rc)"
    }
    expect_line "$out" "ulfm: OK survivors=$((6 - $(echo "$victims" | tr ',' '\n' | wc -l))) .*errors=0" \
        "over $btls, victims $victims"
    killed=$(sed -n 's/^ulfm: rank [0-9]* killed at \([0-9.]*\).*$/\1/p' "$out" | sort -n | head -1)
    learned=$(sed -n "s/^ulfm: rank [0-9]* learned of rank [0-9]*'s death at \([0-9.]*\) .*/\1/p" "$out" | sort -n)
    [ -n "$killed" ] && [ -n "$learned" ] || die "over $btls: no kill or detection time printed"
    info "over $btls${storm:+ (storm)}: every survivor learned of the death within" \
        "$(awk -v a="$killed" -v b="$(echo "$learned" | tail -1)" 'BEGIN { printf "%.3f", b - a }') s of its SIGKILL" \
        "(the first after $(awk -v a="$killed" -v b="$(echo "$learned" | head -1)" 'BEGIN { printf "%.3f", b - a }') s)"
}
# objects_after_death: the xrc job with the survivors holding once they recovered (their connections up): every
# node's xrc-status lists exactly what its HCA holds, the dead rank's record left out (killed, it could not remove
# it; the HCA holds nothing of it), and the counts are the model's for the shrunken job with connections made
# eagerly: per live rank an INI QP per other node, a UD QP and 3 SRQs; per node a TGT QP per live rank elsewhere;
# and per live rank with a live node-mate the loopback INI + TGT pair (osc/rdma's epoch reaches it through xrc too).
# A TGT QP the dead rank made lives on through its node-mate's handle (XRC's contract), and the line says how many.
objects_after_death() {
    local hold=$WORKDIR/ulfm-release node i here loop summary want job
    rm -f "$hold" "$out.raw"
    hold_file=$hold run_ulfm self,sm,xrc &
    job=$!
    for ((i = 0; i < 600; i++)); do
        grep -aq "ulfm: survivors holding" "$out.raw" 2>/dev/null && break
        kill -0 $job 2>/dev/null || break
        sleep 0.1
    done
    grep -aq "ulfm: survivors holding" "$out.raw" 2>/dev/null || { touch "$hold"; wait $job; die "the survivors did not hold"; }
    local survivors=$((6 - $(echo "$victims" | tr ',' '\n' | wc -l)))
    local nodes=(nodeA nodeB nodeC) n v
    for n in 0 1 2; do
        node=${nodes[$n]} here=2
        for v in ${victims//,/ }; do [ $((v / 2)) = $n ] && here=$((here - 1)); done
        loop=$((here > 1 ? here : 0))
        want="same as the HCA: $((here * 2 + loop)) INI, $((survivors - here + loop)) TGT \(holders per TGT QP: [0-9,]*\), $here UD QPs, $((here * 3)) SRQs, 1 XRC domain\(s\)"
        for ((i = 0; i < 100; i++)); do
            sc exec "$node" "$XRC_STATUS" --json >"$WORKDIR/$node.status.json" 2>/dev/null
            sc exec "$node" "$SIMHCA_CTL" list --json >"$WORKDIR/$node.hca.json" 2>&1
            summary=$(/usr/bin/python3 "$TOP_SRCDIR/tests/cluster/status_vs_hca.py" "$WORKDIR/$node.status.json" \
                "$WORKDIR/$node.hca.json" --expect-jobs 1 --ignore-dead) && [[ "$summary" =~ ^$want ]] && break
            sleep 0.2
        done
        [[ "$summary" =~ ^$want ]] || { touch "$hold"; wait $job; die "$node after the death: $summary (model: $want)"; }
        info "$node after the death ($here of its 2 ranks alive): $summary"
    done
    touch "$hold"
    wait $job || die "over self,sm,xrc the survivors did not finish cleanly after holding"
}
run_ulfm self,sm,tcp
objects_after_death
expect_no_objects
# The storm: the victim dies with sends to it in flight, queued on the same connections as its node-mates'
# (tests/mpi/ulfm.c): its node refuses them, and the node-mates' must each arrive once, in order.
storm=1 run_ulfm self,sm,xrc
mates=$(grep -ac "ulfm: rank [0-9]* ([^)]*) received [0-9]* storm messages, each once and in order" "$out")
[ "$mates" -ge 1 ] || die "the storm: no node-mate of the victim received its messages"
info "the storm: $(grep -a "storm messages" "$out" | sed 's/^ulfm: //' | paste -sd';' | sed 's/;/; /g')"
refused=$(grep -ac "btl:xrc: .*: refused: .*goes out again over a new connection" "$out")
[ "$refused" -ge 1 ] || die "the storm: no request to the victim was refused (nothing in flight at its death?)"
first=$(grep -ac "died: its node's HCA refused" "$out")
info "the storm: $refused refused request(s), each cost a new connection and nothing else;" \
    "$first process(es) learned of the death from one (the others from the runtime)"
expect_no_objects
# A death in the middle of rendezvous: the victim dies as soon as it has posted sends of 32 MiB to every survivor
# (their RDMA reads of its memory to come or in flight); each survivor's receive of them must complete whole and
# right or fail, never in part.
rndv=33554432 run_ulfm self,sm,xrc
[ "$(grep -ac "ulfm: rank [0-9]*: rendezvous from the dead: [0-9]* whole and right, [0-9]* failed" "$out")" = $((6 - $(echo "$victims" | tr ',' '\n' | wc -l))) ] ||
    die "a death mid-rendezvous: not every survivor judged its receives from the dead"
info "a death mid-rendezvous ($(grep -a "rendezvous sends had completed" "$out" | sed 's/^ulfm: //')): $(grep -a "rendezvous from the dead" "$out" | sed 's/^ulfm: rank \([0-9]*\): rendezvous from the dead: /\1: /' | paste -sd';' | sed 's/;/; /g')"
expect_no_objects
# A death before any message: rank 4 (the rank of nodeC that rank 0 would connect through) dies as soon as MPI_Init
# has returned. With connections on demand the survivors' connections to nodeC are all made after it, through its
# live rank (not through the dead one until the connect timeout). With connections made eagerly at MPI_Init (the
# default at this size), those made through it before its death reach its node-mate through the TGT QPs it made,
# which that node-mate was asked to hold before they were accepted (HOLD), although nothing had reached it yet.
connect=on-demand victims=4 early=1 run_ulfm self,sm,xrc
expect_no_objects
victims=4 early=1 run_ulfm self,sm,xrc
expect_no_objects
# Two deaths at once, on two nodes, each its node's first rank (the one most connections went through), in a storm.
[ -n "${ULFM_TEST_VICTIMS:-}" ] || { victims=2,4 storm=1 run_ulfm self,sm,xrc && expect_no_objects; }
# With ULFM_TEST_NODE_CRASH=1, a node crashes: both of nodeC's ranks and its HCA daemon die at once (over tcp first,
# the control, then over xrc, then in a storm over xrc). Not in make check: Open MPI 5.0.7 itself fails such jobs
# now and then (over tcp, 2 jobs of 24 left a live rank out of the shrunken communicator: docs/admin.md). Its
# runtime also often hangs in MPI_Finalize's fence once every process of a node has died, over tcp as over xrc
# (open-mpi/ompi#11404; the BTLs are finalized after that fence), so the job is stopped once the survivors have
# printed their verdict and had 3 s more: what is judged is the survivors' recovery and data, and that their HCAs
# hold nothing once their processes are gone.
# node_crash BTLS: one such job over BTLS ($storm=1: in a storm); nodeC's HCA daemon is restarted afterwards.
node_crash() {
    local btls=$1 node_pid i
    node_pid=$(cat "$SIMCLUSTER_STATE/nodes/nodeC/simhcad.pid") || die "no simhcad pid for nodeC"
    rm -f "$out.raw"
    victims=4,5 node_pid=$node_pid run_ulfm "$btls" &
    local job=$!
    for ((i = 0; i < 600; i++)); do
        grep -aqE "ulfm: (OK|FAILED) survivors" "$out.raw" 2>/dev/null && break
        kill -0 $job 2>/dev/null || break
        sleep 0.1
    done
    sleep 3
    pkill -TERM -f "ULFM_NODE_PID=$node_pid" 2>/dev/null
    wait $job || die "over $btls, a node crash: the survivors did not recover (above)"
    ! kill -0 "$node_pid" 2>/dev/null || die "nodeC's HCA daemon (pid $node_pid) was not killed with its ranks"
    # Stopped, not finalized: the survivors' processes may still be exiting when mpirun has returned.
    for ((i = 0; i < 50; i++)); do hcas_empty nodeA nodeB && break; sleep 0.2; done
    SIMCLUSTER_NODES_LIST="nodeA nodeB" expect_no_objects
    sc up --nodes 3 --slots 2 >/dev/null || die "nodeC's HCA daemon did not come back"
}
hcas_empty() {
    local node
    for node in "$@"; do hca_is_empty "$(sc exec "$node" "$SIMHCA_CTL" status 2>&1 | sed -n 2p)" || return 1; done
}
if [ -z "${ULFM_TEST_VICTIMS:-}" ] && [ "${ULFM_TEST_NODE_CRASH:-0}" = 1 ]; then
    node_crash self,sm,tcp
    node_crash self,sm,xrc
    storm=1 node_crash self,sm,xrc
fi
# Two rails (one device with two ports on every node), rail failover on: the storm again. A refusal is a death,
# not the loss of a rail: each costs its request and a new connection on its own rail, both rails carry on, and the
# victim's node-mate gets each of its messages once, in order.
"$SIMCLUSTER" down >/dev/null 2>&1 || die "simcluster down failed"
up_cluster 3 2 --rails 2
storm=1 run_ulfm self,sm,xrc
grep -aq "rail lost" "$out" && die "two rails: a death was taken for the loss of a rail"
mates=$(grep -ac "ulfm: rank [0-9]* ([^)]*) received [0-9]* storm messages, each once and in order" "$out")
[ "$mates" -ge 1 ] || die "two rails, the storm: no node-mate of the victim received its messages"
info "two rails, the storm: $(grep -ac "btl:xrc: .*: refused: .*goes out again over a new connection" "$out")" \
    "refused request(s) on rails $(grep -a "btl:xrc: .*: refused: " "$out" | grep -o 'simhca0:[0-9]*' | sort -u | paste -sd' '); $(grep -a "storm messages" "$out" | sed 's/^ulfm: //' | paste -sd';' | sed 's/;/; /g')"
expect_no_objects
info "PASS"
