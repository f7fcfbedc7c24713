// SPDX-License-Identifier: BSD-3-Clause
// The receive-queue specification parser: valid, boundary and malformed inputs.
#include "src/core/receive_queue_spec.h"

#include <gtest/gtest.h>

using xrc::parse_receive_queues;
using xrc::ReceiveQueueClass;

TEST(ReceiveQueueSpec, ParsesTheDefault) {
    const auto spec = parse_receive_queues("256,1024,256:16384,256,64:65536,64,16");
    ASSERT_TRUE(spec.has_value()) << spec.error().message();
    ASSERT_EQ(spec->classes.size(), 3u);
    EXPECT_EQ(spec->classes[0], (ReceiveQueueClass{256, 1024, 256}));
    EXPECT_EQ(spec->classes[1], (ReceiveQueueClass{16384, 256, 64}));
    EXPECT_EQ(spec->classes[2], (ReceiveQueueClass{65536, 64, 16}));
}

TEST(ReceiveQueueSpec, LowWatermarkDefaultsToAQuarter) {
    const auto spec = parse_receive_queues("128,100");
    ASSERT_TRUE(spec.has_value()) << spec.error().message();
    EXPECT_EQ(spec->classes[0].low_watermark, 25u);
}

TEST(ReceiveQueueSpec, SuffixesAndSpaces) {
    const auto spec = parse_receive_queues(" 4K,8 : 1M,2,1 ");
    ASSERT_TRUE(spec.has_value()) << spec.error().message();
    EXPECT_EQ(spec->classes[0].buffer_size, 4096u);
    EXPECT_EQ(spec->classes[1].buffer_size, 1048576u);
    EXPECT_EQ(spec->classes[1].low_watermark, 1u);
}

TEST(ReceiveQueueSpec, AcceptsOpenibXrcPrefix) {
    const auto spec = parse_receive_queues("X,128,256,192:X,2048,256,128");
    ASSERT_TRUE(spec.has_value()) << spec.error().message();
    EXPECT_EQ(spec->classes[1], (ReceiveQueueClass{2048, 256, 128}));
}

TEST(ReceiveQueueSpec, Boundaries) {
    EXPECT_TRUE(parse_receive_queues("64,1").has_value());
    EXPECT_FALSE(parse_receive_queues("63,1").has_value());
    EXPECT_TRUE(parse_receive_queues("1024M,1").has_value());  // exactly 1 GiB
    EXPECT_FALSE(parse_receive_queues("1025M,1").has_value());
    EXPECT_TRUE(parse_receive_queues("64,4194304").has_value());
    EXPECT_FALSE(parse_receive_queues("64,4194305").has_value());
    EXPECT_FALSE(parse_receive_queues("64,0").has_value());
    EXPECT_TRUE(parse_receive_queues("64,2,1").has_value());
    EXPECT_FALSE(parse_receive_queues("64,2,2").has_value());  // LOW must stay below COUNT
    EXPECT_TRUE(parse_receive_queues("64,1:128,1:256,1:512,1:1K,1:2K,1:4K,1:8K,1").has_value());
    EXPECT_FALSE(parse_receive_queues("64,1:128,1:256,1:512,1:1K,1:2K,1:4K,1:8K,1:16K,1").has_value());
}

TEST(ReceiveQueueSpec, RejectsMalformedInputWithAReason) {
    const char *bad[] = {"",        "   ",          "abc",       "128",        "128,",        ",128",
                         "128,10,2,1", "128,-1",    "128,1.5",   "12x,10",     "128,10:",     ":128,10",
                         "256,10:128,10", "256,10:256,10", "99999999999999999999,1", "128,10,abc", "Y,128,10",
                         "128,,10", "K,10"};
    for (const char *text : bad) {
        const auto spec = parse_receive_queues(text);
        EXPECT_FALSE(spec.has_value()) << "accepted: \"" << text << "\"";
        if (!spec.has_value()) {
            EXPECT_FALSE(spec.error().message().empty()) << text;
        }
    }
}

TEST(ReceiveQueueSpec, ErrorNamesTheClass) {
    const auto spec = parse_receive_queues("256,10:128,10");
    ASSERT_FALSE(spec.has_value());
    EXPECT_NE(spec.error().message().find("class 2"), std::string::npos) << spec.error().message();
    EXPECT_NE(spec.error().message().find("larger than the previous"), std::string::npos) << spec.error().message();
}

TEST(ReceiveQueueSpec, LargestClassMustCoverMaxSendSize) {
    const auto spec = parse_receive_queues("256,10:4096,10");
    ASSERT_TRUE(spec.has_value());
    EXPECT_TRUE(xrc::check_receive_queues_cover(*spec, 4096).has_value());
    EXPECT_FALSE(xrc::check_receive_queues_cover(*spec, 4097).has_value());
}

TEST(ReceiveQueueSpec, CountsMustFitTheDevice) {
    const auto spec = parse_receive_queues("256,1000:4096,10");
    ASSERT_TRUE(spec.has_value());
    EXPECT_TRUE(xrc::check_receive_queues_fit_device(*spec, 1000).has_value());
    const auto fits = xrc::check_receive_queues_fit_device(*spec, 999);
    ASSERT_FALSE(fits.has_value());
    EXPECT_NE(fits.error().message().find("class 1"), std::string::npos) << fits.error().message();
}
