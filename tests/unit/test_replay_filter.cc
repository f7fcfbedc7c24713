// SPDX-License-Identifier: BSD-3-Clause
// The count logic of exactly-once delivery across a lost rail: what a receiver does with a message sent again,
// given how many of the same stream the lost rail delivered, and the per-source SRQ counts.
#include "src/core/replay_filter.h"

#include <gtest/gtest.h>

using namespace xrc;

TEST(ReplayFilter, WhatTheRailDidNotDeliverIsDelivered) {
    // the rail delivered 0..4; 5..7 failed with it
    EXPECT_EQ(judge_replay(5, 5), ReplayVerdict::deliver);
    EXPECT_EQ(judge_replay(6, 5), ReplayVerdict::deliver);
    EXPECT_EQ(judge_replay(7, 5), ReplayVerdict::deliver);
    EXPECT_EQ(judge_replay(0, 0), ReplayVerdict::deliver);  // nothing delivered on the rail
}

TEST(ReplayFilter, DeliveredButUnacknowledgedIsDropped) {
    // 3..7 were in flight: 3 and 4 arrived, their acknowledgements died with the rail; all five are sent again
    EXPECT_EQ(judge_replay(3, 5), ReplayVerdict::duplicate);
    EXPECT_EQ(judge_replay(4, 5), ReplayVerdict::duplicate);
    EXPECT_EQ(judge_replay(5, 5), ReplayVerdict::deliver);
}

TEST(ReplayFilter, CopiesInAnyOrder) {
    // What the sender's queue held fails (and is sent again) before what its HCA had taken: 6, 7, then 3, 4, 5.
    const std::uint32_t taken = 5;
    const std::uint32_t order[] = {6, 7, 3, 4, 5};
    int delivered = 0, dropped = 0;
    for (std::uint32_t seq : order) (judge_replay(seq, taken) == ReplayVerdict::deliver ? delivered : dropped)++;
    EXPECT_EQ(delivered, 3);  // 5, 6, 7: each once
    EXPECT_EQ(dropped, 2);    // 3, 4
}

TEST(SourceCounts, CountsPerSourceWithTheLastCached) {
    SourceCounts counts;
    const auto a = SourceCounts::key(7, 0x1234), b = SourceCounts::key(8, 0x1234), c = SourceCounts::key(7, 0x99);
    EXPECT_NE(a, b);
    EXPECT_NE(a, c);
    for (int i = 0; i < 3; ++i) counts.count(a);
    counts.count(b);
    counts.count(a);
    counts.count(a);
    EXPECT_EQ(counts.of(a), 5u);
    EXPECT_EQ(counts.of(b), 1u);
    EXPECT_EQ(counts.of(c), 0u);  // a source never heard from
    EXPECT_EQ(counts.sources(), 2u);
    EXPECT_EQ(judge_replay(4, counts.of(a)), ReplayVerdict::duplicate);
    EXPECT_EQ(judge_replay(5, counts.of(a)), ReplayVerdict::deliver);
}

TEST(SourceCounts, ANewConnectionCountsFromZeroAgain) {
    // Another process of the node got the QP number of an evicted INI QP: its first message says so.
    SourceCounts counts;
    const auto a = SourceCounts::key(7, 0x1234);
    for (int i = 0; i < 10; ++i) counts.count(a);
    counts.count(a, true);
    counts.count(a);
    EXPECT_EQ(counts.of(a), 2u);
    EXPECT_EQ(judge_replay(2, counts.of(a)), ReplayVerdict::deliver);  // its third message, never delivered
    EXPECT_EQ(judge_replay(1, counts.of(a)), ReplayVerdict::duplicate);
}
