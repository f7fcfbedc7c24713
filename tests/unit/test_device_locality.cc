// SPDX-License-Identifier: BSD-3-Clause
// Device locality: a bound process keeps the devices attached to its CPUs; no information or an unbound process
// keeps everything.
#include "src/core/device_locality.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace {
std::string mask_file(const char *name, const char *mask) {
    std::string path = testing::TempDir() + name;
    std::ofstream(path) << mask << "\n";
    return path;
}
}  // namespace

TEST(DeviceLocality, BoundProcessKeepsItsSocketsDevice) {
    const auto socket0 = mask_file("xrc_loc_s0", "0000000f");  // CPUs 0-3
    const auto socket1 = mask_file("xrc_loc_s1", "000000f0");  // CPUs 4-7
    EXPECT_EQ(xrc::near_devices({socket0, socket1}, {1}), (std::vector<bool>{true, false}));
    EXPECT_EQ(xrc::near_devices({socket0, socket1}, {5, 6}), (std::vector<bool>{false, true}));
}

TEST(DeviceLocality, UnboundProcessKeepsAll) {
    const auto socket0 = mask_file("xrc_loc_u0", "0000000f");
    const auto socket1 = mask_file("xrc_loc_u1", "000000f0");
    EXPECT_EQ(xrc::near_devices({socket0, socket1}, {0, 1, 2, 3, 4, 5, 6, 7}), (std::vector<bool>{true, true}));
}

TEST(DeviceLocality, UnknownLocalityIsNeverDropped) {
    const auto socket1 = mask_file("xrc_loc_k1", "000000f0");
    EXPECT_EQ(xrc::near_devices({"/nonexistent/local_cpus", socket1}, {0}), (std::vector<bool>{true, false}));
    EXPECT_EQ(xrc::near_devices({socket1}, {0}), (std::vector<bool>{true}));  // nothing near: keep everything
}
