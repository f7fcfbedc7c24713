# SPDX-License-Identifier: BSD-3-Clause
# Sourced by the package tests: what a Debian root's cycle may not leave behind.

# processes_in_this_root: prints " [PID CMDLINE]" for every process whose root is this root (the host's processes
# have another), but this shell and the subshell of the command substitution that calls it. Run inside the root at the end of a cycle: the daemons of the installed packages
# (munge, slurmctld, slurmd), the launchers and the simulated nodes must all be gone. The list of processes is taken
# before anything here forks, so the checks' own children are not in it.
processes_in_this_root() {
    local pids=(/proc/[0-9]*) here p left=""
    here=$(stat -c %d:%i /)
    for p in "${pids[@]}"; do
        [ "${p#/proc/}" = $$ ] || [ "${p#/proc/}" = "$BASHPID" ] && continue
        [ "$(stat -L -c %d:%i "$p/root" 2>/dev/null)" = "$here" ] || continue
        left+=" [${p#/proc/} $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-80)]"
    done
    printf '%s' "$left"
}

# mounts_left_on_host DIR: prints the mount points under DIR that this (the host's) mount namespace still shows.
# The root's mounts live in a namespace of their own: after the cycle, there must be none.
mounts_left_on_host() {
    grep -F "$1" /proc/self/mountinfo | cut -d' ' -f5 | tr '\n' ' '
}
