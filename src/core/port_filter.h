// SPDX-License-Identifier: BSD-3-Clause
// btl_xrc_if_include / btl_xrc_if_exclude: which device ports the BTL may use.
// Form: "DEV[:PORT][,DEV[:PORT]]..." e.g. "mlx5_0:1,mlx5_1" (a device without a port means all its ports).
#pragma once

#include "result.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xrc {

struct PortSelector {
    std::string device;
    std::optional<std::uint8_t> port;  // empty: every port of the device

    bool operator==(const PortSelector &) const = default;
};

struct PortFilter {
    std::vector<PortSelector> selectors;

    bool empty() const noexcept { return selectors.empty(); }
    bool matches(std::string_view device, std::uint8_t port) const noexcept;
    bool names_device(std::string_view device) const noexcept;
};

inline constexpr std::string_view kPortFilterSyntax =
    "a comma-separated list of DEVICE or DEVICE:PORT (PORT 1-254), e.g. mlx5_0:1,mlx5_1";

// The selectors (none for an empty text), or what is wrong with the text (ErrorKind::malformed).
Result<PortFilter> parse_port_filter(std::string_view text);

}  // namespace xrc
