// SPDX-License-Identifier: BSD-3-Clause
// A port's data rate from what ibv_query_port says of it (active_speed per lane, active_width lanes), after the
// line encoding (8b/10b up to QDR, 64b/66b from FDR10 on): what the module advertises to ob1 as its bandwidth, so
// that ob1 splits large messages across rails in proportion to what each can carry.
#pragma once

#include <cstdint>

namespace xrc {

// Megabits per second of payload the port carries (EDR 4X: 100000); 0 when either code is one this build does
// not know (the caller keeps its default then).
std::uint32_t port_bandwidth_mbps(std::uint8_t active_speed, std::uint8_t active_width) noexcept;

}  // namespace xrc
