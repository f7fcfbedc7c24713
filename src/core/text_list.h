// SPDX-License-Identifier: BSD-3-Clause
// The comma- and colon-separated lists MCA parameters are written in: one splitter for all of them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace xrc {

// Every field between separators, empty ones included: "a,,b" -> {"a", "", "b"}; "" -> {""}.
std::vector<std::string_view> split_list(std::string_view text, char separator);

// The field without leading and trailing blanks and tabs.
std::string_view trim_blanks(std::string_view field) noexcept;

// The lines, each indented by four blanks and ended by a newline, for a help message; `none` the same way when
// there is none.
std::string indented_lines(const std::vector<std::string> &lines, std::string_view none);

}  // namespace xrc
