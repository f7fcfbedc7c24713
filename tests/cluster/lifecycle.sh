#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Needs root (returns 77 otherwise). Life cycle: up is idempotent, status/ps/exec work, down stops every
# process inside the nodes (also strays started there) and removes every namespace, clean recovers from a
# crashed run whose state directory was lost.
. "$(dirname "$0")/common.sh"
t0=$EPOCHREALTIME
sc up --nodes 3 --slots 1 --no-simhca || die "up failed"
info "up: $(awk -v a="${t0/,/.}" -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.2f", b - a }') s"
holders1=$(cat "$SIMCLUSTER_STATE"/nodes/*/holder.pid | tr '\n' ' ')
sc up --nodes 3 --slots 1 --no-simhca || die "second up failed"
holders2=$(cat "$SIMCLUSTER_STATE"/nodes/*/holder.pid | tr '\n' ' ')
[ "$holders1" = "$holders2" ] || die "up is not idempotent: holders $holders1 -> $holders2"
sc status || die "status reports a problem"
# per-node identity
for n in nodeA nodeB nodeC; do
    h=$(sc exec $n hostname) || die "exec $n failed"
    [ "$h" = "$n" ] || die "hostname in $n is '$h'"
done
[ "$(sc run hostname)" = nodeA ] || die "run does not default to nodeA"
[ "$(sc run --on nodeC hostname)" = nodeC ] || die "run --on nodeC"
# private /tmp and /dev/shm
sc exec nodeA bash -c 'echo a >/tmp/simcluster-probe; echo a >/dev/shm/simcluster-probe' || die "write probe"
sc exec nodeB bash -c '! test -e /tmp/simcluster-probe && ! test -e /dev/shm/simcluster-probe' ||
    die "/tmp or /dev/shm shared between nodes"
test -e /tmp/simcluster-probe && die "node /tmp is the host's /tmp"
# a /dev of its own per node (device files such as the software HCA's /dev/infiniband/uverbs0), over the
# host's, whose devices and mounts (pts) stay usable inside and which never changes
sc exec nodeA bash -c 'mkdir /dev/simcluster-probe && mknod /dev/simcluster-probe/null c 1 3' || die "no private /dev in nodeA"
sc exec nodeB bash -c '! test -e /dev/simcluster-probe' || die "/dev shared between nodes"
test -e /dev/simcluster-probe && die "a node's /dev is the host's /dev"
sc exec nodeA bash -c 'echo x >/dev/simcluster-probe/null && echo x >/dev/null && test -c /dev/pts/ptmx' ||
    die "the host's devices or /dev/pts are not usable in a node"
# private network: the simulated subnet is not on the host, nodes reach each other
ip -o addr | grep -q ' 10\.99\.0\.' && die "simulated address visible on the host"
{ sc exec nodeB bash -c 'exec 3<>/dev/tcp/nodeC/9' 2>&1 || true; } | grep -q refused || die "nodeB cannot reach nodeC"
# the ssh look-alike forwards only chosen variables
out=$(sc run env OMPI_MCA_foo=1 SIMHCA_BAR=2 SECRET_X=3 "$(dirname "$SIMCLUSTER")/simcluster-ssh" nodeB env)
grep -qx OMPI_MCA_foo=1 <<<"$out" || die "OMPI_MCA_* not forwarded"
grep -qx SIMHCA_BAR=2 <<<"$out" || die "SIMHCA_* not forwarded"
grep -q SECRET_X <<<"$out" && die "unrelated variable forwarded"
[ "$(sc run "$(dirname "$SIMCLUSTER")/simcluster-ssh" -x -o BatchMode=yes nodeC echo '$(hostname)' joined)" = "nodeC joined" ] ||
    die "ssh look-alike does not join words and run them in a shell on the node"
# strays inside the nodes are stopped by down (found by namespace, not by name)
sc exec nodeB setsid sleep 1000 </dev/null >/dev/null 2>&1 &
sc exec nodeC bash -c 'trap "" TERM; exec sleep 1000' </dev/null >/dev/null 2>&1 &
sleep 0.5
sc ps >"$WORKDIR/ps.out" || die "ps failed"
grep -q 'sleep 1000' "$WORKDIR/ps.out" || die "ps does not list the strays"
record_ns
t0=$EPOCHREALTIME
sc down || die "down failed"
info "down: $(awk -v a="${t0/,/.}" -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.2f", b - a }') s"
wait
assert_gone
assert_ns_gone
sc status >/dev/null && die "status says up after down"
# software HCA hook, with a mock daemon (python3): fabric file, one daemon per node, LD_LIBRARY_PATH, down stops them
if command -v python3 >/dev/null; then
    mock=$(cd "$(dirname "$0")/mock" && pwd)
    mkdir -p "$WORKDIR/lib" && : >"$WORKDIR/lib/libibverbs.so.1"
    SIMHCAD=$mock/simhcad SIMHCA_LIBDIR=$WORKDIR/lib sc up --nodes 3 || die "up with the mock simhcad failed"
    grep -qx 'node nodeC lid 3 addr 10.99.0.12 port [0-9]*' "$SIMCLUSTER_STATE/fabric" || die "bad fabric file"
    st=$(sc status) || die "status reports a problem with the daemons: $st"
    grep -q '^nodeB .* pid [0-9]*$' <<<"$st" || die "status shows no daemon on nodeB"
    for n in nodeA nodeB nodeC; do
        a=$(sc exec $n "$mock/simhca-ctl" status) || die "no daemon answers in $n"
        [ "$a" = "ok $n lid $(( $(printf %d "'${n#node}") - 64 ))" ] || die "$n: daemon answer '$a'"
    done
    daemons=$(cat "$SIMCLUSTER_STATE"/nodes/*/simhcad.pid | tr '\n' ' ')
    out=$(SIMHCA_LIBDIR=$WORKDIR/lib sc run "$(dirname "$SIMCLUSTER")/simcluster-ssh" nodeB env)
    grep -q "^LD_LIBRARY_PATH=$WORKDIR/lib" <<<"$out" || die "LD_LIBRARY_PATH to the software HCA not set/forwarded"
    sc down || die "down failed"
    for p in $daemons; do
        [ -d /proc/$p ] && [ "$(awk '{print $3}' /proc/$p/stat 2>/dev/null)" != Z ] && die "daemon $p still alive after down"
    done
    info "software HCA hook ok (mock daemons $daemons)"
else
    info "python3 missing: software HCA hook not tested"
fi

# --pin-cpus: each node's processes on their own CPU (node i on CPU i mod CPUs); without it, on all of them
if [ "$(nproc)" -ge 2 ]; then
    sc up --nodes 2 --slots 1 --no-simhca --pin-cpus || die "up --pin-cpus failed"
    maskA=$(sc exec nodeA bash -c 'taskset -p $$' | awk '{print $NF}')
    maskB=$(sc exec nodeB bash -c 'taskset -p $$' | awk '{print $NF}')
    [ "$maskA" = 1 ] && [ "$maskB" = 2 ] || die "pinned nodes run on CPU masks $maskA and $maskB (want 1 and 2)"
    sc up --nodes 2 --slots 1 --no-simhca || die "up without pinning failed"
    maskB=$(sc exec nodeB bash -c 'taskset -p $$' | awk '{print $NF}')
    [ "$maskB" != 2 ] || die "after up without --pin-cpus, nodeB is still pinned"
    info "pin: nodeA mask $maskA, nodeB ${maskB}"
    sc down || die "down failed"
fi

# crash: the state directory disappears while the nodes run; clean finds the holders by their marker
sc up --nodes 2 --no-simhca || die "up after down failed"
record_ns
sc exec nodeB setsid sleep 1000 </dev/null >/dev/null 2>&1 &
sleep 0.3
rm -rf --one-file-system "$SIMCLUSTER_STATE"/nodes "$SIMCLUSTER_STATE"/fabric.pid "$SIMCLUSTER_STATE"/config
sc clean || die "clean failed"
wait
assert_gone
assert_ns_gone
info "PASS"
