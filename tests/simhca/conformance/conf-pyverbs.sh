#!/bin/sh
# rdma-core's pyverbs suite (Debian python3-pyverbs) against the software HCA. `make check` runs the core
# verbs modules below (the set that exercises what the issue asks for, within a few minutes); the whole
# suite runs with `make check-pyverbs-full` (PYVERBS_MODULES=all). No failure or error is allowed; every
# skip is listed with its reason; once XRC works, the XRC tests must PASS (a skip is a failure then).
. "$(dirname "$0")/conf-common.sh"
: "${PYVERBS_MODULES:=test_device test_pd test_mr test_cq test_cq_events test_qp test_qpex test_cqex test_atomic test_fork test_shared_pd}"
[ -d /usr/share/doc/rdma-core/tests ] || skip_all "pyverbs suite not installed (apt-get install python3-pyverbs)"
$PY -c 'import pyverbs' 2>/dev/null || skip_all "pyverbs not importable by $PY"
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
[ "$PYVERBS_MODULES" = all ] && PYVERBS_MODULES=""
# shellcheck disable=SC2086
timeout -k 10 "${PYVERBS_TIMEOUT:-900}" $PY "$(dirname "$0")/conf-pyverbs.py" "$scratch" --dev simhca0 \
    $required $PYVERBS_MODULES > "$scratch/pyverbs.out" 2>&1
rc=$?
# Show the report (failures with tracebacks, skip reasons, counts) without unittest's line of progress dots.
grep -v '^[.sEFxu]*$' "$scratch/pyverbs.out" | tail -400
[ $rc -eq 124 ] && echo "pyverbs run timed out"
result "pyverbs ${PYVERBS_MODULES:-all modules}" $rc
finish
