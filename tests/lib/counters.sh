# SPDX-License-Identifier: BSD-3-Clause
# btl xrc's counters as a job reports them, read by name (sourced by tests/btl and tests/cluster). Every test that
# checks what a job did by its counters reads them here, from one source: the counters line each process's module
# (one per port) prints at MPI_Finalize when the job runs with btl_xrc_verbose 10 (btl_xrc/btl_xrc_pvars.cc):
#
#     [HOST:PID] btl:xrc: DEVICE:PORT counters: rank=RANK ring_sends=N srq_sends=N ...
#
# Its values are the module's at finalize, so nothing of the job is still in flight; the names are those of the
# MPI_T variables without their btl_xrc_ prefix (src/core/counters.h). The MPI_T variables themselves (one sum per
# process, read while the job runs) are what tests/mpi/pvars checks.
#
# Every function takes the job's output FILE, then selectors that narrow the lines it reads:
#   --rank R    the process of rank R (in its own job: spawned children count from 0)
#   --port P    the modules on port P of their device (several rails: one module per port)
#   --host H    the processes on host H (the line's [HOST:PID] prefix)
#
#   counters_lines FILE [SELECTORS]       the counters lines themselves, one per module
#   counters_modules FILE [SELECTORS]     how many there are
#   counter FILE NAME [SELECTORS]         NAME's value in each of them, one per line, in the file's order
#   counter_sum FILE NAME [SELECTORS]     the sum of those values (0 when there is no line)
#   counter_nonzero FILE NAME [SELECTORS] how many modules counted NAME at least once

# counters_lines FILE [--rank R] [--port P] [--host H]
counters_lines() {
    local file=$1 rank='[0-9]+' port='[0-9]+' host='[^]:]+'
    shift
    while [ $# -gt 0 ]; do
        case $1 in
        --rank) rank=$2 ;;
        --port) port=$2 ;;
        --host) host=$2 ;;
        *) echo "counters_lines: unknown selector $1" >&2; return 2 ;;
        esac
        shift 2
    done
    grep -aE "\[$host:[0-9]+\] btl:xrc: [^ ]+:$port counters: rank=$rank " "$file"
}

counters_modules() { counters_lines "$@" | grep -c .; }

# counter FILE NAME [SELECTORS]
counter() {
    local file=$1 name=$2
    shift 2
    counters_lines "$file" "$@" | sed -n "s/.* $name=\([0-9]*\).*/\1/p"
}

counter_sum() { counter "$@" | awk '{ s += $1 } END { print s + 0 }'; }

counter_nonzero() { counter "$@" | awk '$1 > 0' | grep -c .; }
