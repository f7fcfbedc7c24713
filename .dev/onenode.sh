#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Manual single-node run on a private simhcad: .dev/onenode.sh MPIRUN-ARGS...
B=/work/wt/scale/build
export SIMHCA_INSTANCE=dev-$$
export OMPI_MCA_mca_base_component_path="$B/components:$(ompi_info --path pkglibdir --parsable | cut -d: -f3)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 HWLOC_COMPONENTS=-gl OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
$B/src/simhca/simhcad --node n0 > /tmp/simhcad.$$.log 2>&1 &
d=$!
$B/src/simhca/simhca-ctl wait-ready --timeout 10 >/dev/null
timeout -k 5 ${T:-60} mpirun -x SIMHCA_INSTANCE -x LD_LIBRARY_PATH=$B/src/simhca/lib/.libs --mca pml ob1 "$@"
rc=$?
$B/src/simhca/simhca-ctl status | sed -n 2p
kill $d; wait $d 2>/dev/null
exit $rc
