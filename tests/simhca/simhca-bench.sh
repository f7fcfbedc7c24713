#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Speed of the software HCA against its raw substrate, all measured in ONE run (issue 3, "Speed"):
#   two nodes  = two private simhcad instances on this host joined by a fabric file on 127.0.0.1
#                (their traffic is TCP over loopback), compared with our own raw TCP ping-pong and stream
#                between two processes over 127.0.0.1 (simhca-rawbench tcp);
#   one node   = both perftest processes on one daemon, compared with a process_vm_writev loop
#                (simhca-rawbench pvm), which is what the daemon's DMA is made of;
#   Open MPI   = btl openib ping-pong (ompi_pingpong.c) on one node, to watch MPI latency (optional).
# Every measurement is repeated REPS times, interleaved, and the medians are compared; per-round ratios are
# printed too. The raw baselines run as plain processes and, when the daemons are SCHED_RR, as SCHED_RR too:
# each round compares against the stronger of the two.
# Targets: simhca latency <= 2x the TCP round trip; two-node bandwidth >= 1/2 of the TCP stream; one-node
# bandwidth >= 1/2 of the process_vm_writev loop. perftest's *_lat report half a round trip (they divide by
# two); the table shows both that figure against the TCP RTT (the target as issue 3 states it) and the
# round trip against the round trip.
# Not a test: prints figures, never fails on them. Starts its daemons with private SIMHCA_INSTANCE names
# and stops them (and everything else it started) by pid.
#
# Usage: simhca-bench.sh [--reps N] [--quick] [--no-ompi] [--keep] [--only tcp,pvm,lat2,sbw2,wbw2,mr2,lat1,sbw1,wbw1,mr1,ompi]
# Environment (the Makefile's `bench` target sets them): SIMHCAD, SIMHCA_CTL, SIMHCA_LIBDIR, RAWBENCH,
#   MPICC, MPIRUN, srcdir.
set -u
: "${SIMHCAD:=../../src/simhca/simhcad}"
: "${SIMHCA_CTL:=../../src/simhca/simhca-ctl}"
: "${SIMHCA_LIBDIR:=../../src/simhca/lib/.libs}"
: "${RAWBENCH:=./simhca-rawbench}"
: "${MPICC:=mpicc}"
: "${MPIRUN:=mpirun}"
srcdir=${srcdir:-$(dirname "$0")}
reps=5 quick=0 ompi=1 keep=0 only=
while [ $# -gt 0 ]; do
    case $1 in
    --reps) reps=$2; shift ;;
    --quick) quick=1 ;;
    --no-ompi) ompi=0 ;;
    --keep) keep=1 ;;
    --only) only=",$2,"; shift ;;
    -h|--help) sed -n '3,22p' "$0"; exit 0 ;;
    *) echo "simhca-bench: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
for t in ib_send_lat ib_send_bw ib_write_bw; do
    command -v $t >/dev/null || { echo "simhca-bench: $t not installed (Debian perftest)"; exit 1; }
done
for f in "$SIMHCAD" "$SIMHCA_CTL" "$RAWBENCH"; do [ -x "$f" ] || { echo "simhca-bench: $f not built"; exit 1; }; done
SIMHCAD=$(readlink -f "$SIMHCAD") SIMHCA_CTL=$(readlink -f "$SIMHCA_CTL") RAWBENCH=$(readlink -f "$RAWBENCH")
SIMHCA_LIBDIR=$(readlink -f "$SIMHCA_LIBDIR")

lat_iters=20000 bw_iters=2000 rate_iters=100000 tcp_iters=20000 stream=$((4 << 30)) pvm_bytes=$((16 << 30))
[ $quick = 1 ] && lat_iters=3000 bw_iters=400 rate_iters=20000 tcp_iters=3000 stream=$((1 << 30)) pvm_bytes=$((4 << 30))

work=$(mktemp -d /tmp/simhca-bench-XXXXXX)
pids=""
daemons=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    for p in $daemons; do kill -TERM "$p" 2>/dev/null; done
    for p in $pids $daemons; do wait "$p" 2>/dev/null; done
    [ $keep = 1 ] && echo "outputs kept in $work" || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }
listening() {
    hex=$(printf '%04X' "$1")
    awk -v p=":$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# Two daemons = two nodes; instance a is also "the one node".
inst_a="bench-$$-a" inst_b="bench-$$-b"
pa=$(free_port) pb=$(free_port)
while [ "$pb" = "$pa" ]; do pb=$(free_port); done
printf 'node na lid 1 addr 127.0.0.1 port %s\nnode nb lid 2 addr 127.0.0.1 port %s\n' "$pa" "$pb" > "$work/fabric"
. "$(dirname "$0")/../lib/hca.sh"
for n in a b; do
    SIMHCA_INSTANCE="bench-$$-$n" hca_daemon_start "$work/simhcad-$n.log" --node "n$n" --fabric "$work/fabric" \
        --sysfs "$work/sys-$n/class/infiniband/simhca0"
    rc=$?
    daemons="$daemons $hca_daemon_pid"
    [ $rc -eq 0 ] || { echo "simhca-bench: simhcad $n did not start"; exit 1; }
done
export LD_LIBRARY_PATH="$SIMHCA_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# CPU time (ns, /proc/PID/schedstat) and sleeps (voluntary context switches) of both daemons: the
# daemons' cost per message does not depend on how busy the machine is, unlike the rates.
daemon_cost() {
    local ns=0 sw=0 p
    for p in $daemons; do
        for t in /proc/$p/task/*/schedstat; do ns=$((ns + $(cut -d' ' -f1 "$t"))); done # (the copier thread too)
        sw=$((sw + $(awk '/^voluntary_ctxt_switches/ { print $2 }' /proc/$p/status)))
    done
    echo "$ns $sw"
}
# perf SERVER_INST CLIENT_INST OUT TOOL ARGS...: server and client of one perftest run; the client's output
# goes to OUT, the daemons' CPU microseconds and sleeps per iteration (-n) to OUT.cost. Returns non-zero
# when either side failed.
perf() {
    local si=$1 ci=$2 out=$3
    shift 3
    local iters=0 a prev=""
    for a in "$@"; do [ "$prev" = -n ] && iters=$a; prev=$a; done
    local port
    port=$(free_port)
    SIMHCA_INSTANCE=$si timeout -k 5 120 "$@" -d simhca0 -F -p "$port" > "$out.server" 2>&1 < /dev/null &
    local spid=$!
    pids="$pids $spid"
    local i=0
    while ! listening "$port" && [ $i -lt 100 ] && kill -0 $spid 2>/dev/null; do i=$((i + 1)); sleep 0.05; done
    local c0 c1
    c0=$(daemon_cost)
    SIMHCA_INSTANCE=$ci timeout -k 5 120 "$@" -d simhca0 -F -p "$port" 127.0.0.1 > "$out" 2>&1 < /dev/null
    local rc=$?
    wait $spid || rc=1
    c1=$(daemon_cost)
    # (includes connection setup, a few ms: negligible next to thousands of iterations)
    echo "$c0 $c1" | awk -v n="$iters" '{ if (n > 0) printf "%.2f %.2f\n", ($3 - $1) / 1000 / n, ($4 - $2) / n }' > "$out.cost"
    return $rc
}
# perftest result lines: latency -> t_typical (column 5) in us; bandwidth -> BW average (column 4, MiB/s) in GB/s.
lat_of() { awk '$1 ~ /^[0-9]+$/ && NF >= 7 { v = $5 } END { if (v != "") print v; else print "nan" }' "$1"; }
bw_of() { awk '$1 ~ /^[0-9]+$/ && NF >= 5 { v = $4 * 1048576 / 1e9 } END { if (v != "") printf "%.3f\n", v; else print "nan" }' "$1"; }
rate_of() { awk '$1 ~ /^[0-9]+$/ && NF >= 5 { v = $5 } END { if (v != "") print v; else print "nan" }' "$1"; }
kv() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }

# Open MPI one-node ping-pong (btl openib on daemon a), as ompi-openib.sh runs it.
if [ $ompi = 1 ]; then
    if command -v "$MPICC" >/dev/null && command -v "$MPIRUN" >/dev/null &&
        "$MPICC" -O2 -o "$work/pp" "$srcdir/ompi_pingpong.c" 2>"$work/mpicc.err"; then :; else
        echo "(Open MPI row skipped: no mpicc/mpirun or build failed)"; ompi=0
    fi
fi
ompi_run() {
    local root=()
    [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
    SIMHCA_INSTANCE=$inst_a SYSFS_PATH="$work/sys-a" timeout 120 "$MPIRUN" "${root[@]}" -np 2 \
        -x LD_LIBRARY_PATH -x SYSFS_PATH -x SIMHCA_INSTANCE \
        --mca pml ob1 --mca btl openib,self --mca btl_openib_allow_ib 1 \
        --mca btl_openib_warn_no_device_params_found 0 --mca mpi_yield_when_idle 1 \
        --mca hwloc_base_binding_policy none "$work/pp" > "$1" 2>&1
}

# Scheduling classes the baselines run in: plain, plus SCHED_RR 1 when the daemons got it (main.cpp).
classes=plain
first_daemon=$(echo $daemons | cut -d' ' -f1)
chrt -p "$first_daemon" 2>/dev/null | grep -q SCHED_RR && chrt -r 1 true 2>/dev/null && classes="plain rr"
run_in() { [ "$1" = rr ] && echo "chrt -r 1"; }
# best min|max GLOB KEY: the lowest / highest value of KEY over the files GLOB names (nan if none)
best() {
    cat $2 2>/dev/null | awk -v k="$3" -v m="$1" '$1 == k && $2 + 0 > 0 {
        if (v == "" || (m == "min" && $2 < v) || (m == "max" && $2 > v)) v = $2 } END { print (v == "" ? "nan" : v) }'
}
want() { [ -z "$only" ] || [[ $only == *",$1,"* ]]; }
[ $ompi = 1 ] && ! want ompi && ompi=0
declare -A vals
add() { vals[$1]="${vals[$1]:-} ${2:-nan}"; } # (nan keeps the rounds aligned for per-round ratios)
failed=""

# perf_case NAME CLIENT_INSTANCE EXTRACT TOOL ARGS...: when NAME is wanted, one perftest pair (server on
# node A, client on CLIENT_INSTANCE: node B for the two-node cases, A for one node), its figure (EXTRACT
# reads it from the client's output) and the daemons' CPU cost (NAME_cpu, NAME_sw) for this round ($r).
perf_case() {
    local name=$1 client=$2 extract=$3
    shift 3
    want "$name" || return 0
    perf "$inst_a" "$client" "$work/$name.$r" "$@" || failed="$failed $name"
    add "$name" "$($extract "$work/$name.$r")"
    add "${name}_cpu" "$(cut -d" " -f1 "$work/$name.$r.cost" 2>/dev/null)"
    add "${name}_sw" "$(cut -d" " -f2 "$work/$name.$r.cost" 2>/dev/null)"
}

for r in $(seq "$reps"); do
    echo "--- round $r of $reps" >&2
    # Each baseline runs as a plain process and, when the daemons run SCHED_RR, in their class too; the
    # round's baseline is the stronger of the two (lower RTT, higher rate), so that neither the daemons'
    # priority on a loaded machine nor a slow real-time wake-up flatters a ratio.
    if want tcp; then
        for cls in $classes; do
            $(run_in $cls) "$RAWBENCH" tcp --iters $tcp_iters --stream-bytes $stream > "$work/tcp.$cls.$r" 2>&1 ||
                failed="$failed tcp.$cls"
            add tcp_rtt_$cls "$(kv "$work/tcp.$cls.$r" tcp_rtt_median_us)"
            add tcp_bw_$cls "$(kv "$work/tcp.$cls.$r" tcp_stream_gbs)"
        done
        add tcp_rtt "$(best min "$work/tcp.*.$r" tcp_rtt_median_us)"
        add tcp_bw "$(best max "$work/tcp.*.$r" tcp_stream_gbs)"
    fi
    if want pvm; then
        for cls in $classes; do
            $(run_in $cls) "$RAWBENCH" pvm --bytes $pvm_bytes > "$work/pvm.$cls.$r" 2>&1 || failed="$failed pvm.$cls"
            add pvm_bw_$cls "$(kv "$work/pvm.$cls.$r" pvm_gbs)"
        done
        add pvm_bw "$(best max "$work/pvm.*.$r" pvm_gbs)"
    fi
    perf_case lat2 "$inst_b" lat_of ib_send_lat -c RC -s 8 -n $lat_iters
    perf_case sbw2 "$inst_b" bw_of ib_send_bw -c RC -s 1048576 -n $bw_iters
    perf_case wbw2 "$inst_b" bw_of ib_write_bw -c RC -s 1048576 -n $bw_iters
    perf_case mr2 "$inst_b" rate_of ib_send_bw -c RC -s 8 -n $rate_iters
    perf_case lat1 "$inst_a" lat_of ib_send_lat -c RC -s 8 -n $lat_iters
    perf_case sbw1 "$inst_a" bw_of ib_send_bw -c RC -s 1048576 -n $((bw_iters * 2))
    perf_case wbw1 "$inst_a" bw_of ib_write_bw -c RC -s 1048576 -n $((bw_iters * 2))
    perf_case mr1 "$inst_a" rate_of ib_send_bw -c RC -s 8 -n $rate_iters
    if [ $ompi = 1 ]; then
        ompi_run "$work/ompi.$r" || failed="$failed ompi"
        add ompi_lat "$(awk '$1 == 8 && $2 == "bytes:" { print $3 }' "$work/ompi.$r")"
        add ompi_bw "$(awk '$1 == 1048576 && $2 == "bytes:" { printf "%.3f", $6 / 1000 }' "$work/ompi.$r")"
    fi
done

med() { # median of the (numeric) words in $1
    echo $1 | tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "nan" }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "nan" }'; }
verdict() { # VALUE OP LIMIT
    awk -v v="$1" -v op="$2" -v l="$3" 'BEGIN { if (v == "nan") print "?"; else if ((op == "<=" && v <= l) || (op == ">=" && v >= l)) print "MET"; else print "not met" }'
}
for k in tcp_rtt tcp_bw pvm_bw lat2 sbw2 wbw2 mr2 lat1 sbw1 wbw1 mr1 ompi_lat ompi_bw \
    lat2_cpu lat2_sw sbw2_cpu sbw2_sw wbw2_cpu wbw2_sw mr2_cpu mr2_sw lat1_cpu lat1_sw sbw1_cpu sbw1_sw \
    wbw1_cpu wbw1_sw mr1_cpu mr1_sw; do eval "m_$k=\$(med \"\${vals[$k]:-}\")"; done
# per-round ratios A/B (each compares two figures of the same round)
per_round() {
    local a=(${vals[$1]:-}) b=(${vals[$2]:-}) i out=""
    for i in "${!a[@]}"; do out="$out $(ratio "${a[$i]}" "${b[$i]:-nan}")"; done
    echo $out
}
rtt2=$(awk -v l="$m_lat2" 'BEGIN { if (l == "nan") print "nan"; else printf "%.2f", 2 * l }')
r_lat=$(ratio "$m_lat2" "$m_tcp_rtt") r_rtt=$(ratio "$rtt2" "$m_tcp_rtt")
r_sbw2=$(ratio "$m_sbw2" "$m_tcp_bw") r_wbw2=$(ratio "$m_wbw2" "$m_tcp_bw")
r_sbw1=$(ratio "$m_sbw1" "$m_pvm_bw") r_wbw1=$(ratio "$m_wbw1" "$m_pvm_bw")

echo
echo "simhca speed, $reps round(s), medians; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  raw TCP 8 B RTT (127.0.0.1)          $m_tcp_rtt us      [$(echo ${vals[tcp_rtt]:-})]"
echo "  raw TCP stream 1 MiB writes          $m_tcp_bw GB/s   [$(echo ${vals[tcp_bw]:-})]"
echo "  process_vm_writev loop 1 MiB         $m_pvm_bw GB/s   [$(echo ${vals[pvm_bw]:-})]"
for cls in $classes; do
    echo "    as $cls processes: RTT [$(echo ${vals[tcp_rtt_$cls]:-})] us, stream [$(echo ${vals[tcp_bw_$cls]:-})]," \
        "pvm [$(echo ${vals[pvm_bw_$cls]:-})] GB/s"
done
echo "    (each round's baseline is the stronger of these)"
printf '\n  %-44s %-9s %-26s %-14s %-6s %s\n' "simhca (perftest -c RC)" "median" "rounds" "daemons/iter" "ratio" \
    "target"
# row LABEL MEDIAN ROUNDS RATIO TARGET [KEY]: KEY's daemon CPU microseconds and sleeps per iteration (medians)
row() {
    local cost=""
    [ -n "${6:-}" ] && cost="$(eval echo "\$m_${6}_cpu")us $(eval echo "\$m_${6}_sw")sl"
    printf '  %-44s %-9s %-26s %-14s %-6s %s\n' "$1" "$2" "[$(echo $3)]" "$cost" "$4" "$5"
}
row "ib_send_lat 8 B, two nodes (us, half RTT)" "$m_lat2" "${vals[lat2]:-}" "$r_lat" "<= 2 x TCP RTT: $(verdict "$r_lat" '<=' 2)" lat2
row "  = round trip (us)" "$rtt2" "" "$r_rtt" "(RTT vs RTT; 2x: $(verdict "$r_rtt" '<=' 2))"
row "ib_send_bw 1 MiB, two nodes (GB/s)" "$m_sbw2" "${vals[sbw2]:-}" "$r_sbw2" ">= 0.5 x TCP stream: $(verdict "$r_sbw2" '>=' 0.5)" sbw2
row "ib_write_bw 1 MiB, two nodes (GB/s)" "$m_wbw2" "${vals[wbw2]:-}" "$r_wbw2" ">= 0.5 x TCP stream: $(verdict "$r_wbw2" '>=' 0.5)" wbw2
row "ib_send_bw 8 B, two nodes (Mpps)" "$m_mr2" "${vals[mr2]:-}" "" "" mr2
row "ib_send_lat 8 B, one node (us, half RTT)" "$m_lat1" "${vals[lat1]:-}" "" "" lat1
row "ib_send_bw 1 MiB, one node (GB/s)" "$m_sbw1" "${vals[sbw1]:-}" "$r_sbw1" ">= 0.5 x pvm loop: $(verdict "$r_sbw1" '>=' 0.5)" sbw1
row "ib_write_bw 1 MiB, one node (GB/s)" "$m_wbw1" "${vals[wbw1]:-}" "$r_wbw1" ">= 0.5 x pvm loop: $(verdict "$r_wbw1" '>=' 0.5)" wbw1
row "ib_send_bw 8 B, one node (Mpps)" "$m_mr1" "${vals[mr1]:-}" "" "" mr1
if [ $ompi = 1 ]; then
    row "Open MPI openib 8 B, one node (us, half RTT)" "$m_ompi_lat" "${vals[ompi_lat]:-}" "" ""
    row "Open MPI openib 1 MiB, one node (GB/s)" "$m_ompi_bw" "${vals[ompi_bw]:-}" "" ""
fi
echo
echo "  per-round ratios (same round): lat2/RTT [$(per_round lat2 tcp_rtt)]  sbw2/stream [$(per_round sbw2 tcp_bw)]" \
    " wbw2/stream [$(per_round wbw2 tcp_bw)]  sbw1/pvm [$(per_round sbw1 pvm_bw)]  wbw1/pvm [$(per_round wbw1 pvm_bw)]"
[ -n "$failed" ] && echo "  runs that FAILED:$failed (outputs: --keep)"
exit 0
