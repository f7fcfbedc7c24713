// SPDX-License-Identifier: BSD-3-Clause
#include "receive_queue_spec.h"

#include "text_list.h"

#include <charconv>

namespace xrc {
namespace {

// Parses a non-negative decimal number with an optional K/M suffix; false on anything else or overflow.
bool parse_number(std::string_view s, std::uint64_t &out, bool allow_suffix) {
    s = trim_blanks(s);
    std::uint64_t scale = 1;
    if (allow_suffix && !s.empty()) {
        const char last = s.back();
        if (last == 'k' || last == 'K') scale = 1024;
        if (last == 'm' || last == 'M') scale = 1024 * 1024;
        if (scale != 1) s.remove_suffix(1);
    }
    if (s.empty()) return false;
    std::uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || ptr != s.data() + s.size()) return false;
    if (value > UINT64_MAX / scale) return false;
    out = value * scale;
    return true;
}

std::string class_error(std::size_t index, std::string_view cls, std::string_view what) {
    return "class " + std::to_string(index + 1) + " (\"" + std::string(cls) + "\"): " + std::string(what);
}

}  // namespace

Result<ReceiveQueueSpec> parse_receive_queues(std::string_view text) {
    ReceiveQueueSpec spec;
    text = trim_blanks(text);
    if (text.empty()) {
        return malformed("the list is empty");
    }
    const auto classes = split_list(text, ':');
    if (classes.size() > kMaxReceiveClasses) {
        return malformed("too many classes (" + std::to_string(classes.size()) + ", at most " +
                         std::to_string(kMaxReceiveClasses) + ")");
    }
    for (std::size_t i = 0; i < classes.size(); ++i) {
        const std::string_view cls = trim_blanks(classes[i]);
        auto fields = split_list(cls, ',');
        if (!fields.empty()) {
            const std::string_view first = trim_blanks(fields.front());
            if (first == "X" || first == "x") fields.erase(fields.begin());
        }
        if (fields.size() < 2 || fields.size() > 3) {
            return malformed(class_error(i, cls, "expected SIZE,COUNT or SIZE,COUNT,LOW"));
        }
        std::uint64_t size = 0, count = 0, low = 0;
        if (!parse_number(fields[0], size, true)) {
            return malformed(class_error(i, cls, "SIZE is not a number"));
        }
        if (!parse_number(fields[1], count, false)) {
            return malformed(class_error(i, cls, "COUNT is not a number"));
        }
        if (size < kMinReceiveBufferSize || size > kMaxReceiveBufferSize) {
            return malformed(class_error(i, cls, "SIZE must be between 64 bytes and 1 GiB"));
        }
        if (count < 1 || count > kMaxReceiveCount) {
            return malformed(class_error(i, cls, "COUNT must be between 1 and 4194304"));
        }
        if (fields.size() == 3) {
            if (!parse_number(fields[2], low, false)) {
                return malformed(class_error(i, cls, "LOW is not a number"));
            }
            if (low >= count) {
                return malformed(class_error(i, cls, "LOW must be smaller than COUNT"));
            }
        } else {
            low = count / 4;
        }
        if (!spec.classes.empty() && size <= spec.classes.back().buffer_size) {
            return malformed(class_error(i, cls, "SIZE must be larger than the previous class's"));
        }
        spec.classes.push_back({static_cast<std::size_t>(size), static_cast<std::uint32_t>(count),
                                static_cast<std::uint32_t>(low)});
    }
    return spec;
}

Result<void> check_receive_queues_cover(const ReceiveQueueSpec &spec, std::size_t max_send_size) {
    if (spec.classes.empty()) return Error(ErrorKind::resource, "no receive queue classes");
    if (spec.classes.back().buffer_size < max_send_size) {
        return Error(ErrorKind::resource, "the largest class holds " + std::to_string(spec.classes.back().buffer_size) +
                                              " bytes, less than the largest fragment the BTL sends (" +
                                              std::to_string(max_send_size) + " bytes)");
    }
    return {};
}

Result<void> check_receive_queues_fit_device(const ReceiveQueueSpec &spec, std::uint32_t max_srq_wr) {
    for (std::size_t i = 0; i < spec.classes.size(); ++i) {
        if (spec.classes[i].count > max_srq_wr) {
            return Error(ErrorKind::resource,
                         "class " + std::to_string(i + 1) + " posts " + std::to_string(spec.classes[i].count) +
                             " buffers, more than the device's SRQ holds (" + std::to_string(max_srq_wr) + ")");
        }
    }
    return {};
}

}  // namespace xrc
