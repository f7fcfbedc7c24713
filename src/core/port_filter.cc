// SPDX-License-Identifier: BSD-3-Clause
#include "port_filter.h"

#include "text_list.h"

#include <charconv>

namespace xrc {

bool PortFilter::matches(std::string_view device, std::uint8_t port) const noexcept {
    for (const auto &sel : selectors) {
        if (sel.device == device && (!sel.port || *sel.port == port)) return true;
    }
    return false;
}

bool PortFilter::names_device(std::string_view device) const noexcept {
    for (const auto &sel : selectors) {
        if (sel.device == device) return true;
    }
    return false;
}

Result<PortFilter> parse_port_filter(std::string_view text) {
    PortFilter filter;
    if (text.empty()) return filter;  // unset: no selectors
    for (const std::string_view field : split_list(text, ',')) {
        const std::string_view item = trim_blanks(field);
        if (item.empty()) {
            return malformed("empty entry in the list");
        }
        PortSelector sel;
        const std::size_t colon = item.find(':');
        sel.device = std::string(item.substr(0, colon));
        if (sel.device.empty()) {
            return malformed("entry \"" + std::string(item) + "\" has no device name");
        }
        if (colon != std::string_view::npos) {
            const std::string_view port = item.substr(colon + 1);
            unsigned value = 0;
            const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
            if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || value < 1 || value > 254) {
                return malformed("entry \"" + std::string(item) + "\": the port must be a number from 1 to 254");
            }
            sel.port = static_cast<std::uint8_t>(value);
        }
        filter.selectors.push_back(std::move(sel));
    }
    return filter;
}

}  // namespace xrc
