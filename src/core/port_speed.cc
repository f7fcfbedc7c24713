// SPDX-License-Identifier: BSD-3-Clause
#include "port_speed.h"

namespace xrc {
namespace {

struct Code {
    std::uint8_t code;
    std::uint32_t value;
};

// Payload Mb/s per lane for each active_speed code of <infiniband/verbs.h>: 8b/10b up to QDR, 64b/66b from
// FDR10 on (HDR and NDR signal with PAM4 at 53.125 / 106.25 Gb/s for 50 / 100 of payload).
constexpr Code kLaneRates[] = {{1, 2000},   {2, 4000},   {4, 8000},   {8, 10000},
                               {16, 13636}, {32, 25000}, {64, 50000}, {128, 100000}};
// Lanes for each active_width code (1X, 4X, 8X, 12X, 2X).
constexpr Code kLanes[] = {{1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}};

template <std::size_t N>
std::uint32_t lookup(const Code (&table)[N], std::uint8_t code) noexcept {
    for (const Code &entry : table)
        if (entry.code == code) return entry.value;
    return 0;
}

}  // namespace

std::uint32_t port_bandwidth_mbps(std::uint8_t active_speed, std::uint8_t active_width) noexcept {
    return lookup(kLaneRates, active_speed) * lookup(kLanes, active_width);
}

}  // namespace xrc
