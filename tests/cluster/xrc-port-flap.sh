#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise) and the software HCA. A port that goes down and comes back (a link flap) is
# ridden through with the default grace: verified all-to-all traffic at 2x2 and at 4x2 while nodeB's port goes down
# for 0.5 s, 2 s and 10 s in turn; each job completes with every byte verified, and nodeB's ranks counted each hold
# and resume (their counters at finalize); connections started while the port is down wait and complete after it
# (on demand). A port that comes back without its PORT_ACTIVE event is found active when the grace runs out, and
# the job goes on. A port that stays down longer than btl_xrc_port_down_grace ends the job (btl_xrc_outage_limit 0)
# with a message naming host, device and port. Open MPI's openib and UCX (rc_v) over the same flaps at 2x2 are comparison lines when this Open
# MPI has them. Nothing stays in any node's HCA afterwards.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/xrc-common.sh"
up_cluster 4 2

flaps=(0.5 2 10)
xrc="--mca pml ob1 --mca btl self,vader,xrc"
# ridden_through HOSTS WHAT: xrc over the flaps with the default grace (the retry budget, 34 s): the job completes
# with every byte verified, and each of nodeB's two ranks counted one hold and one resume per flap.
ridden_through() {
    local hosts=$1 what=$2 n=${#flaps[@]} holds out=$WORKDIR/out-$2
    flapped_run "$out" "$hosts" "$xrc --mca btl_xrc_verbose 10" 4 "${flaps[@]}"
    [ $rc != noflow ] || die "$what: no traffic in the xrc job"
    [ $rc = 0 ] || die "$what: the job did not ride through the flaps (exit $rc)"
    expect_line "$out" '^steady: OK .*errors=0' "xrc $what, nodeB's port down ${flaps[*]} s"
    grep -q 'btl:xrc: nodeB: simhca0:1: the port went down' "$out" || die "$what: no message naming the port going down"
    grep -q 'btl:xrc: nodeB: simhca0:1: the port is active again' "$out" ||
        die "$what: no message naming the port back"
    holds=$(paste <(counter "$out" port_downs --host nodeB) <(counter "$out" port_ups --host nodeB) |
        grep -c "^$n	$n\$")
    [ "$holds" = 2 ] || die "$what: $holds of nodeB's 2 ranks counted $n holds and $n resumes"
    info "$what: held and resumed $n times on both of nodeB's ranks: $(paste -d' ' \
        <(counter "$out" port_downs --host nodeB) <(counter "$out" port_ups --host nodeB) \
        <(counter "$out" port_down_ms --host nodeB) |
        awk '{ printf " port_downs=%s port_ups=%s port_down_ms=%s;", $1, $2, $3 }')"
    grep -q 'btl:xrc: .* error\|MPI_ABORT\|btl:xrc: .*failed' "$out" && die "$what: an error was reported during the flaps"
    return 0
}
ridden_through nodeA:2,nodeB:2 2x2
ridden_through "$(hosts_spec 4 2)" 4x2

# Connections made during a flap wait and complete after it: on demand, the odd ranks make no MPI call (and no
# connection) until the go file appears, and it appears while nodeB's port is down (for 3 s).
rm -f "$WORKDIR/stop"
XRC_MPIRUN_ARGS="--mca btl_xrc_verbose 10 --mca btl_xrc_connect on-demand" \
    xrc_run "$WORKDIR/late" nodeA:2,nodeB:2 self,vader,xrc "$MPI_DIR/late_pairs" "$WORKDIR/stop" >/dev/null &
job=$!
wait_for_line "$WORKDIR/late.raw" '^late_pairs: traffic' 60 || { wait $job; die "no traffic in the late_pairs job"; }
sc exec nodeB "$SIMHCA_CTL" fault port-down >/dev/null || die "port-down failed"
sleep 0.5
touch "$WORKDIR/stop"
info "nodeB's port down, the odd ranks start connecting at $(date +%T.%N | cut -c1-12)"
sleep 3
sc exec nodeB "$SIMHCA_CTL" fault port-up >/dev/null || die "port-up failed"
wait $job || die "connections made during the flap failed (exit $?): $(grep -m3 'btl:xrc' "$WORKDIR/late" | tr '\n' ' ')"
expect_line "$WORKDIR/late" '^late_pairs: OK .*errors=0' "connections made while nodeB's port was down (on demand)"
[ "$(counter "$WORKDIR/late" connection_failures | awk '$1 > 0' | grep -c .)" = 0 ] || die "a connection failed"
info "connection attempts per process: $(counter "$WORKDIR/late" connection_attempts | tr '\n' ' ')," \
    "CM retransmissions: $(counter_sum "$WORKDIR/late" cm_retransmissions)"

# The port comes back but its PORT_ACTIVE never reaches the processes (lost, or read too late under load): when
# the grace runs out the BTL asks the port, finds it active and resumes; the job completes.
FLAP_UP_FAULT=port-up-quiet flapped_run "$WORKDIR/quiet" nodeA:2,nodeB:2 "$xrc --mca btl_xrc_port_down_grace 3" 6 1
[ $rc != noflow ] || die "no traffic in the xrc job whose port came back without its event"
[ $rc = 0 ] || die "a port back without its PORT_ACTIVE event ended the job (exit $rc)"
expect_line "$WORKDIR/quiet" '^steady: OK .*errors=0' "xrc, nodeB's port down 1 s and back without PORT_ACTIVE"
n=$(grep -c 'btl:xrc: nodeB: simhca0:1: the port is active, its PORT_ACTIVE event not seen' "$WORKDIR/quiet")
[ "$n" = 2 ] || die "$n of nodeB's 2 ranks found the port active when the grace ran out"
info "port back without its event: both of nodeB's ranks found it active when the 3 s grace ran out"

# Down longer than the grace: the job ends, naming host, device and port (btl_xrc_outage_limit 0: the limit would ride
# the outage for up to 300 s, xrc-outage.sh).
MPIRUN_TIMEOUT=60 flapped_run "$WORKDIR/long" nodeA:2,nodeB:2 \
    "$xrc --mca btl_xrc_port_down_grace 2 --mca btl_xrc_outage_limit 0" 30 5
[ $rc != noflow ] || die "no traffic in the xrc job with a 2 s grace"
[ $rc != 0 ] && [ $rc != 124 ] || die "a port down past the grace did not end the job cleanly (exit $rc)"
grep -q 'btl:xrc: nodeB: simhca0:1: the port has been down for more than 2 s' "$WORKDIR/long" ||
    die "no message naming host, device, port and the grace"
info "port down 5 s with a 2 s grace: the job ended (exit $rc), $elapsed s after the port went down:" \
    "$(grep -m1 'btl:xrc: nodeB: simhca0:1: the port has been down' "$WORKDIR/long")"

# Comparison lines, not checks: openib (Open MPI 4.1 only) and UCX's rc_v over the same flaps at 2x2.
# compare NAME MPIRUN-ARGS: one run, its outcome in one line
compare() {
    local name=$1 args=$2
    MPIRUN_TIMEOUT=90 flapped_run "$WORKDIR/$name" nodeA:2,nodeB:2 "$args" 4 "${flaps[@]}"
    if [ $rc = noflow ]; then
        info "comparison: $name carried no traffic within 60 s"
    else
        # its result line, or else the first error it printed
        local result
        result=$(grep -a -m1 -E '^steady: (OK|FAILED)' "$WORKDIR/$name") ||
            result=$(grep -a -m1 -iE 'completion with error|retry|error' "$WORKDIR/$name") || result='no result line'
        info "comparison: $name, nodeB's port down ${flaps[*]} s: exit $rc ($elapsed s after the last port-down): $result"
    fi
}
ompi_info=$(dirname "$(command -v "$MPIRUN")")/ompi_info
ompi_components=$("$ompi_info" --parsable 2>/dev/null)  # read whole: grep -q on a pipe would SIGPIPE it
if grep -q '^mca:btl:openib:' <<<"$ompi_components"; then
    compare openib "--mca pml ob1 --mca btl self,vader,openib --mca btl_openib_allow_ib 1 --mca btl_openib_warn_no_device_params_found 0"
fi
if grep -q '^mca:pml:ucx:' <<<"$ompi_components"; then
    compare ucx "--mca pml ucx --mca btl self,vader -x UCX_TLS=rc_v,self,sm"
fi
sleep 1
expect_no_objects
info "PASS"
