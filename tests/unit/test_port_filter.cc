// SPDX-License-Identifier: BSD-3-Clause
// btl_xrc_if_include / if_exclude parsing and matching.
#include "src/core/port_filter.h"

#include <gtest/gtest.h>

using xrc::parse_port_filter;

TEST(PortFilter, EmptyMeansNoSelection) {
    const auto f = parse_port_filter("");
    ASSERT_TRUE(f.has_value());
    EXPECT_TRUE(f->empty());
}

TEST(PortFilter, DevicesAndPorts) {
    const auto f = parse_port_filter("mlx5_0:1, mlx5_1");
    ASSERT_TRUE(f.has_value()) << f.error().message();
    ASSERT_EQ(f->selectors.size(), 2u);
    EXPECT_TRUE(f->matches("mlx5_0", 1));
    EXPECT_FALSE(f->matches("mlx5_0", 2));
    EXPECT_TRUE(f->matches("mlx5_1", 1));
    EXPECT_TRUE(f->matches("mlx5_1", 2));
    EXPECT_FALSE(f->matches("mlx4_0", 1));
    EXPECT_TRUE(f->names_device("mlx5_0"));
    EXPECT_FALSE(f->names_device("mlx5"));
}

TEST(PortFilter, RejectsMalformedEntries) {
    for (const char *text : {"mlx5_0:", "mlx5_0:0", "mlx5_0:255", "mlx5_0:x", ":1", "a,,b", "a,", ",a", "a:1:2"}) {
        const auto f = parse_port_filter(text);
        EXPECT_FALSE(f.has_value()) << "accepted: \"" << text << "\"";
    }
}
