// SPDX-License-Identifier: BSD-3-Clause
// Where a process's status record (status_record.h) lives, and how it is replaced and read. The record sits next
// to the job's XRC domain file: <dir>/btl_xrc_status.<job>.<rank>, with <job> = "<jobid>.<uid>" as in that file's
// name. It is replaced atomically (written to a hidden temporary file in the same directory, then renamed over
// it), so a reader sees the old record or the new one, never a mix; mode 0600; never written or read through a
// symbolic link, and read only from a regular file of bounded size.
#pragma once

#include "result.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace xrc {

inline constexpr const char *kStatusFilePrefix = "btl_xrc_status.";
inline constexpr std::size_t kMaxStatusFileBytes = 64u << 20;

std::string status_file_name(const std::string &job, std::uint32_t rank);
// A name status_file_name() makes (not its temporary file).
bool is_status_file_name(std::string_view name);

// Replaces `path` by `bytes`, or says why not (the temporary file is gone either way).
Result<void> replace_file(const std::string &path, std::string_view bytes);
// The contents of the regular file `path` (at most `max` bytes), or why not: ErrorKind::gone when there is no such
// file (a record whose process finished meanwhile).
Result<std::string> read_regular_file(const std::string &path, std::size_t max);

}  // namespace xrc
