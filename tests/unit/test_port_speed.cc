// SPDX-License-Identifier: BSD-3-Clause
// Port data rates as the module advertises them to ob1: the encodings of every speed and width code, and 0 for
// codes this build does not know.
#include "src/core/port_speed.h"

#include <gtest/gtest.h>

using namespace xrc;

TEST(PortSpeed, CommonLinks) {
    EXPECT_EQ(port_bandwidth_mbps(32, 2), 100000u);    // EDR 4X
    EXPECT_EQ(port_bandwidth_mbps(4, 2), 32000u);      // QDR 4X: 40 Gb/s signalling, 8b/10b
    EXPECT_EQ(port_bandwidth_mbps(64, 2), 200000u);    // HDR 4X
    EXPECT_EQ(port_bandwidth_mbps(64, 16), 100000u);   // HDR100 (2X)
    EXPECT_EQ(port_bandwidth_mbps(16, 2), 54544u);     // FDR 4X
    EXPECT_EQ(port_bandwidth_mbps(1, 1), 2000u);       // SDR 1X
    EXPECT_EQ(port_bandwidth_mbps(128, 8), 1200000u);  // NDR 12X
}

TEST(PortSpeed, UnknownCodesGiveZero) {
    EXPECT_EQ(port_bandwidth_mbps(0, 2), 0u);
    EXPECT_EQ(port_bandwidth_mbps(3, 2), 0u);
    EXPECT_EQ(port_bandwidth_mbps(32, 0), 0u);
    EXPECT_EQ(port_bandwidth_mbps(32, 3), 0u);
}
