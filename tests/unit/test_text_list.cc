// SPDX-License-Identifier: BSD-3-Clause
// The list splitter every MCA list parameter goes through.
#include "src/core/text_list.h"

#include <gtest/gtest.h>

using namespace xrc;

TEST(TextList, KeepsEmptyFields) {
    using V = std::vector<std::string_view>;
    EXPECT_EQ(split_list("a,,b", ','), (V{"a", "", "b"}));
    EXPECT_EQ(split_list("", ','), (V{""}));
    EXPECT_EQ(split_list(",", ','), (V{"", ""}));
    EXPECT_EQ(split_list("256,16:4096,8", ':'), (V{"256,16", "4096,8"}));
    EXPECT_EQ(split_list("self", ','), (V{"self"}));
}

TEST(TextList, TrimsBlanksAndTabsOnly) {
    EXPECT_EQ(trim_blanks(" \tmlx5_0:1 \t"), "mlx5_0:1");
    EXPECT_EQ(trim_blanks("   "), "");
    EXPECT_EQ(trim_blanks("a b"), "a b");
    EXPECT_EQ(trim_blanks("\nx"), "\nx");
}

TEST(TextList, IndentedLinesForAHelpMessage) {
    EXPECT_EQ(xrc::indented_lines({"mlx5_0", "mlx5_1"}, "(none)"), "    mlx5_0\n    mlx5_1\n");
    EXPECT_EQ(xrc::indented_lines({}, "(no verbs device at all)"), "    (no verbs device at all)\n");
}
