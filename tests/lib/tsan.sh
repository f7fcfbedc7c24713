# SPDX-License-Identifier: BSD-3-Clause
# ThreadSanitizer in the MPI processes of an --enable-tsan build (sourced by tests/btl/common.sh and
# tests/cluster/common.sh). Open MPI stays uninstrumented: its MPI processes get the runtime of GCC's libtsan
# preloaded (the plugin, the core, the software HCA's library and the test programs are instrumented), with the
# suppressions of tests/tsan.supp, and each process writes its reports to a file of its own, which the caller
# counts after the job. A report counts against us when one of its stacks (the accesses, or the only stack of a
# report of another kind) has a frame in btl_xrc/, src/core/ or src/simhca/: the stacks of where a thread was
# created, a block allocated or a mutex made name our code in reports about other code too. Every other report
# (in Open MPI's code) is counted and listed, never fatal.
#
#   tsan_on                  true in an --enable-tsan build (BTL_XRC_TSAN, from the test directories' Makefiles)
#   tsan_job_args DIR        sets the array tsan_args: mpirun's -x arguments for a job whose processes write their
#                            reports into DIR (made empty; any path every process sees)
#   tsan_check DIR WHAT      after the job: one line saying what DIR holds, then every distinct report naming our
#                            code in full; status 1 when there is one
#   tsan_check_files WHAT FILE...  the same for the reports in these files (a daemon's log: the software HCA's
#                            daemons of the simulated cluster are instrumented too, their reports go to their logs)
# Environment: TSAN_KEEP=DIR copies every job's report files to DIR (the test's own directory goes at its end);
# TSAN_SURVEY=1 lists the reports but never fails a job for them (to see every race of a test in one run).
#
# Options: ignore_noninstrumented_modules=1: the C library functions ThreadSanitizer intercepts (memcpy,
# process_vm_readv, pthread_mutex_lock, ...) do not count the memory accesses of uninstrumented callers (Open MPI,
# the C and C++ runtimes), whose ordering (atomics, fences, lock-free lists) it cannot see; their locks, condition
# variables and thread starts still order threads. Without it every job reports Open MPI's own accesses: vader's
# process_vm_readv into a receive buffer the application then reads, a wait object on one thread's stack locked by
# the thread that completes its request. (The per-library form, called_from_lib in tests/tsan.supp, would also
# drop those libraries' locks, so that ob1's lock no longer orders our callbacks.) exitcode=0, so that a report
# does not change a process's exit status (the count decides); history_size=4 (of 0..7), so that the earlier
# access of a race still has its stack in a long job.
# OMPI_MCA_memory=^patcher: Open MPI's memory hooks patch munmap and madvise, and a thread that exits calls madvise
# on its stack after ThreadSanitizer has released the thread's state: the hook's pthread_mutex_lock then crashes
# the process in the runtime (about one threaded job in two). Without the hooks the rcache is not told of memory
# given back to the system, which the software HCA (it reaches memory by address) does not mind.
# HWLOC_COMPONENTS without pci and opencl: hwloc's PCI discovery reads the PCI name database through libpciaccess,
# which grows a buffer with realloc line by line; ThreadSanitizer's realloc always copies, and MPI_Init then costs
# about 10 s of CPU per process instead of 0.3 s. Nothing here needs PCI objects (the devices' locality comes from
# their sysfs files, src/core/device_locality.h).

TSAN_OUR_CODE='(btl_xrc|src/core|src/simhca)/'

tsan_on() { [ -n "${BTL_XRC_TSAN:-}" ]; }

tsan_job_args() {
    local dir=$1 supp
    supp="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tsan.supp"
    rm -rf "$dir" && mkdir -p "$dir"
    tsan_args=(-x LD_PRELOAD="$(gcc -print-file-name=libtsan.so)" -x OMPI_MCA_memory='^patcher' -x HWLOC_COMPONENTS=-gl,-pci,-opencl
        -x TSAN_OPTIONS="log_path=$dir/tsan:suppressions=$supp:ignore_noninstrumented_modules=1:exitcode=0:history_size=4:second_deadlock_stack=1${TSAN_EXTRA_OPTIONS:+:$TSAN_EXTRA_OPTIONS}")
}

# tsan_split FILE...: every report of these files, each on one line with its lines joined by \x01, prefixed with
# "ours " or "other ".
tsan_split() {
    cat "$@" 2>/dev/null | awk -v ours="$TSAN_OUR_CODE" '
        /^(WARNING: |==[0-9]+==ERROR: )ThreadSanitizer:/ { in_report = 1; text = $0; mine = 0; skip = 0; next }
        !in_report { next }
        { text = text "\001" $0 }
        /^SUMMARY: ThreadSanitizer:|^==[0-9]+==ABORTING/ { print (mine ? "ours " : "other ") text; in_report = 0; next }
        /^  [A-Z]/ { skip = ($0 ~ /^  (Location is|(Mutex M|Thread T)[0-9]+ .*created)/) }
        /^    #[0-9]+ / && !skip && $0 ~ ours { mine = 1 }'
}

tsan_check() {
    local dir=$1
    if [ -n "${TSAN_KEEP:-}" ]; then
        mkdir -p "$TSAN_KEEP/$(basename "$dir").$$" && cp "$dir"/tsan.* "$TSAN_KEEP/$(basename "$dir").$$/" 2>/dev/null
    fi
    tsan_check_files "$2 ($(ls "$dir" 2>/dev/null | wc -l) report file(s) in $dir)" "$dir"/tsan.*
}

tsan_check_files() {
    local what=$1 all ours other
    shift
    all=$(tsan_split "$@")
    ours=$(grep -c '^ours ' <<<"$all")
    other=$(grep -c '^other ' <<<"$all")
    echo "tsan: $what: $ours report(s) naming our code, $other in Open MPI's or the C library's"
    if [ "$other" -gt 0 ]; then
        grep '^other ' <<<"$all" | tr '\001' '\n' | sed -n 's/^SUMMARY: ThreadSanitizer: /tsan:   other: /p' |
            sort | uniq -c | sort -rn | head -5
    fi
    [ "$ours" -eq 0 ] && return 0
    # each distinct one (by its summary line) in full, once
    grep '^ours ' <<<"$all" | awk -F '\001' '{ s = $NF; if (!(s in seen)) { seen[s] = 1; print } }' |
        sed 's/^ours //' | tr '\001' '\n' | sed 's/^/tsan: | /'
    [ "${TSAN_SURVEY:-}" = 1 ] && return 0
    return 1
}
