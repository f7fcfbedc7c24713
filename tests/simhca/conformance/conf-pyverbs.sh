#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# rdma-core's pyverbs suite (Debian python3-pyverbs) against the software HCA, one process per module (a
# crash costs one module and is reported). `make check` runs every generic module; the vendor modules
# (test_mlx5_*, test_efa*, test_cuda*: they need that hardware and can only skip here) run too with
# `make check-pyverbs-full` (PYVERBS_MODULES=all). Measured against core's library in progress: all 44
# modules in 23 s. No failure, error or crash is allowed; every skip is listed with its reason; once XRC
# works, the XRC tests must PASS (a skip is a failure then).
. "$(dirname "$0")/conf-common.sh"
suite=/usr/share/doc/rdma-core/tests
[ -d $suite ] || skip_all "pyverbs suite not installed (apt-get install python3-pyverbs)"
if [ -z "${PYVERBS_MODULES:-}" ]; then
    PYVERBS_MODULES=$(cd $suite && ls test_*.py test_*.py.gz 2>/dev/null | sed 's/\.py\(\.gz\)\?$//' |
        grep -Ev '^test_(mlx5_|efa|cuda)' | sort | tr '\n' ' ')
fi
$PY -c 'import pyverbs' 2>/dev/null || skip_all "pyverbs not importable by $PY"

# Three tests (test_odp huge traffic x2, test_parent_domain huge page traffic) need free 2 MiB huge pages
# and skip when the pool is empty. As root, grow the pool by a few pages for this run only; the EXIT trap
# (cleanup -> extra_cleanup) puts the old size back. If the kernel refuses, the skips stay with their reason.
hp_sys=/proc/sys/vm/nr_hugepages
hp_free=/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages
hp_old=""
extra_cleanup() {
    [ -n "$hp_old" ] && echo "$hp_old" > $hp_sys 2>/dev/null
    hp_old=""
}
if [ "$(id -u)" = 0 ] && [ -w $hp_sys ] && [ -r $hp_free ] && [ "$(cat $hp_free)" -lt 4 ]; then
    hp_before=$(cat $hp_sys)
    hp_want=$((hp_before + 8))
    if echo $hp_want > $hp_sys 2>/dev/null; then
        hp_old=$hp_before
        echo "note: 2 MiB huge pages for this run: $hp_before -> $(cat $hp_sys) (free $(cat $hp_free)); restored on exit"
    else
        echo "note: the kernel refused more 2 MiB huge pages; the huge page tests will skip"
    fi
fi
start_daemon

# The suite needs a device and RC traffic to mean anything; without them every test errors out.
gate "pyverbs suite" device rc || finish
required=""
if feature_ok xrc; then
    for t in test_qpex.QpExTestCase.test_qp_ex_xrc_send test_qpex.QpExTestCase.test_qp_ex_xrc_send_imm \
             test_cqex.CqExTestCase.test_xrc_traffic_cq_ex; do
        required="$required --require-pass $t"
    done
else
    echo "note: XRC not working yet ($why): the XRC tests are not yet required to pass"
fi
# Object import works: a skip of these is a regression.
required="$required --require-pass test_shared_pd.SharedPDTestCase.test_imported_rc_ex_rdma_write"
required="$required --require-pass test_device.SharedDMTest.test_import_dm"
# With free 2 MiB huge pages the huge page tests must pass too.
if [ -r $hp_free ] && [ "$(cat $hp_free)" -ge 4 ]; then
    for t in test_odp.OdpTestCase.test_odp_rc_huge_traffic test_odp.OdpTestCase.test_odp_rc_huge_user_addr_traffic \
             test_parent_domain.ParentDomainTrafficTest.test_huge_page_traffic; do
        required="$required --require-pass $t"
    done
fi
# Tag matching (TM SRQs) works since the tm branch: TMTest must pass, not skip (when its module runs).
case " $PYVERBS_MODULES " in
*" test_tag_matching "* | " all ")
    for t in test_tm_traffic test_tm_unexpected_tag test_tm_no_tag test_tm_rndv; do
        required="$required --require-pass test_tag_matching.TMTest.$t"
    done
    ;;
esac
# RDMA CM (test_rdmacm, over our librdmacm.so.1 next to our libibverbs): pyverbs takes the device's IP
# address from the net interface under the REAL /sys/class/infiniband/DEV/device/net/. As root the suite
# runs in a private mount namespace where conf-ib-netdev.sh shows simhca0 there with the first interface
# that has an IPv4 address (lo, 127.0.0.1, in a bare namespace); then the CM tests must pass. Not root:
# nothing changes and they skip ("doesn't have net interface").
in_netns=""
if [ "$(id -u)" = 0 ] && command -v unshare > /dev/null 2>&1 && unshare -m --propagation private true 2> /dev/null; then
    cm_if=$(ip -o -4 addr show up 2> /dev/null | awk '{ print $2; exit }')
    cm_root=$("$SIMHCA_CTL" sysfs-root 2> /dev/null)
    cm_ns="unshare -m --propagation private $(dirname "$0")/conf-ib-netdev.sh $scratch $cm_root $cm_if"
    # Try the whole setup once (a container may refuse the mounts even to root): on failure, the old skips.
    if [ -n "$cm_if" ] && [ -n "$cm_root" ] && $cm_ns test -d "/sys/class/infiniband/simhca0/device/net/$cm_if" 2> /dev/null; then
        in_netns=$cm_ns
        echo "note: RDMA CM tests see simhca0 with net interface $cm_if (private mount namespace)"
        case " $PYVERBS_MODULES " in
        *" test_rdmacm "* | " all ")
            for t in sync_traffic async_traffic async_reject_traffic async_multicast_traffic \
                     async_ex_multicast_traffic async_ex_leave_multicast_traffic async_traffic_external_qp \
                     async_udp_traffic async_read async_write; do
                required="$required --require-pass test_rdmacm.CMTestCase.test_rdmacm_$t"
            done
            ;;
        esac
    fi
fi
[ "$PYVERBS_MODULES" = all ] && PYVERBS_MODULES=""
# shellcheck disable=SC2086
# Bounds: a hung module is killed after PYVERBS_MODULE_TIMEOUT and reported; the whole run after
# PYVERBS_TIMEOUT (keeps `make check` within its budget).
timeout -k 10 "${PYVERBS_TIMEOUT:-400}" $in_netns $PY "$(dirname "$0")/conf-pyverbs.py" "$scratch" --dev simhca0 \
    --module-timeout "${PYVERBS_MODULE_TIMEOUT:-120}" --known-gaps "$gaps_file" $required $PYVERBS_MODULES > "$scratch/pyverbs.out" 2>&1 < /dev/null
rc=$?
# Show the report (failures with tracebacks, skip reasons, counts) without unittest's line of progress dots.
grep -v "^[.sEFxu]*$" "$scratch/pyverbs.out" | tail -400
[ $rc -eq 124 ] && echo "pyverbs run timed out"
result "pyverbs suite ($(echo ${PYVERBS_MODULES:-all} | wc -w) modules: ${PYVERBS_MODULES:-all})" $rc
finish
