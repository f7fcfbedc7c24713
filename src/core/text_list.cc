// SPDX-License-Identifier: BSD-3-Clause
#include "text_list.h"

namespace xrc {

std::vector<std::string_view> split_list(std::string_view text, char separator) {
    std::vector<std::string_view> fields;
    std::size_t start = 0;
    for (;;) {
        const std::size_t end = text.find(separator, start);
        fields.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
        if (end == std::string_view::npos) return fields;
        start = end + 1;
    }
}

std::string_view trim_blanks(std::string_view field) noexcept {
    while (!field.empty() && (field.front() == ' ' || field.front() == '\t')) field.remove_prefix(1);
    while (!field.empty() && (field.back() == ' ' || field.back() == '\t')) field.remove_suffix(1);
    return field;
}

std::string indented_lines(const std::vector<std::string> &lines, std::string_view none) {
    if (lines.empty()) return "    " + std::string(none) + "\n";
    std::string text;
    for (const std::string &line : lines) text += "    " + line + "\n";
    return text;
}

}  // namespace xrc
