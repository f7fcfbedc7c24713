// SPDX-License-Identifier: BSD-3-Clause
#include "process_identity.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace xrc {

std::optional<std::uint64_t> start_ticks_of_stat(std::string_view stat) {
    // "PID (COMM) STATE PPID ...": the fields after the last ')' are plain numbers; start time is field 22, the
    // 20th after the command name.
    const std::size_t close = stat.rfind(')');
    if (close == std::string_view::npos) return std::nullopt;
    std::size_t pos = close + 1;
    for (int field = 3; field <= 22; ++field) {
        while (pos < stat.size() && stat[pos] == ' ') ++pos;
        const std::size_t end = stat.find(' ', pos);
        const std::string_view word = stat.substr(pos, end == std::string_view::npos ? stat.npos : end - pos);
        if (word.empty()) return std::nullopt;
        if (field == 22) {
            std::uint64_t ticks = 0;
            const auto [p, ec] = std::from_chars(word.data(), word.data() + word.size(), ticks);
            if (ec != std::errc() || p != word.data() + word.size()) return std::nullopt;
            return ticks;
        }
        if (end == std::string_view::npos) return std::nullopt;
        pos = end;
    }
    return std::nullopt;
}

std::optional<std::uint64_t> process_start_ticks(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    if (!in) return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    return start_ticks_of_stat(text.str());
}

std::string kernel_boot_id() {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string id;
    if (!(in >> id)) return {};
    return id;
}

}  // namespace xrc
