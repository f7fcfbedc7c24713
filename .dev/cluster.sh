#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Manual simulated-cluster runs: .dev/cluster.sh up N P | run MPIRUN-ARGS... | exec NODE CMD... | down
B=/work/wt/scale/build
export SIMCLUSTER_STATE=/var/tmp/simcluster-scale
export SIMHCAD=$B/src/simhca/simhcad SIMHCA_LIBDIR=$B/src/simhca/lib/.libs
export OMPI_MCA_mca_base_component_path="$B/components:$(ompi_info --path pkglibdir --parsable | cut -d: -f3)"
sc=/work/wt/scale/src/simcluster/simcluster
case $1 in
up) $sc up --nodes $2 --slots $3 ;;
down) $sc down ;;
run) shift; $sc run timeout -k 5 ${T:-90} mpirun --mca pml ob1 "$@" ;;
exec) shift; $sc exec "$@" ;;
esac
