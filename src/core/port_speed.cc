// SPDX-License-Identifier: BSD-3-Clause
#include "port_speed.h"

namespace xrc {

std::uint32_t port_bandwidth_mbps(std::uint8_t active_speed, std::uint8_t active_width) noexcept {
    // Payload Mb/s per lane (the ibv_port_attr speed codes of <infiniband/verbs.h>).
    std::uint32_t per_lane = 0;
    switch (active_speed) {
        case 1: per_lane = 2000; break;     // SDR 2.5 Gb/s, 8b/10b
        case 2: per_lane = 4000; break;     // DDR 5 Gb/s
        case 4: per_lane = 8000; break;     // QDR 10 Gb/s
        case 8: per_lane = 10000; break;    // FDR10 10.3125 Gb/s, 64b/66b
        case 16: per_lane = 13636; break;   // FDR 14.0625 Gb/s
        case 32: per_lane = 25000; break;   // EDR 25.78125 Gb/s
        case 64: per_lane = 50000; break;   // HDR 53.125 Gb/s PAM4
        case 128: per_lane = 100000; break; // NDR
        default: return 0;
    }
    std::uint32_t lanes = 0;
    switch (active_width) {
        case 1: lanes = 1; break;
        case 16: lanes = 2; break;
        case 2: lanes = 4; break;
        case 4: lanes = 8; break;
        case 8: lanes = 12; break;
        default: return 0;
    }
    return per_lane * lanes;
}

}  // namespace xrc
