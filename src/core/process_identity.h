// SPDX-License-Identifier: BSD-3-Clause
// Telling a live process from a record of one that is gone: a pid alone is not enough (pids are reused), so a
// process is named by its pid, its start time (field 22 of /proc/PID/stat: clock ticks after boot) and the
// kernel's boot id. Read from /proc, which is what the node shows whatever the HCA is.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace xrc {

// The start time of process `pid`, or nothing when there is no such process (or /proc does not say).
std::optional<std::uint64_t> process_start_ticks(pid_t pid);
// The start time field of a /proc/PID/stat line (the command name in it may hold spaces and parentheses).
std::optional<std::uint64_t> start_ticks_of_stat(std::string_view stat);
// /proc/sys/kernel/random/boot_id, or "" when unreadable.
std::string kernel_boot_id();

}  // namespace xrc
