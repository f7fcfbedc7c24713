// SPDX-License-Identifier: BSD-3-Clause
// The count logic of exactly-once delivery across a lost rail: what a receiver does with a message sent again,
// given how many of the same stream the lost rail delivered, and the per-source SRQ counts.
#include "src/core/replay_filter.h"

#include <gtest/gtest.h>

using namespace xrc;

TEST(ReplayFilter, SentAgainAfterWhatTheRailDeliveredIsDeliveredInOrder) {
    std::uint32_t taken = 5;  // the rail delivered 0..4; 5..7 failed with it
    EXPECT_EQ(judge_replay(5, taken), ReplayVerdict::deliver);
    EXPECT_EQ(judge_replay(6, taken), ReplayVerdict::deliver);
    EXPECT_EQ(judge_replay(7, taken), ReplayVerdict::deliver);
    EXPECT_EQ(taken, 8u);
}

TEST(ReplayFilter, DeliveredButUnacknowledgedIsDroppedOnce) {
    // 3..7 were in flight: 3 and 4 arrived, their acknowledgements died with the rail; all five are sent again.
    std::uint32_t taken = 5;
    EXPECT_EQ(judge_replay(3, taken), ReplayVerdict::duplicate);
    EXPECT_EQ(judge_replay(4, taken), ReplayVerdict::duplicate);
    EXPECT_EQ(taken, 5u);
    EXPECT_EQ(judge_replay(5, taken), ReplayVerdict::deliver);
    EXPECT_EQ(judge_replay(6, taken), ReplayVerdict::deliver);
    EXPECT_EQ(judge_replay(7, taken), ReplayVerdict::deliver);
    // the same message a second time (never sent twice, but a duplicate must not get through)
    EXPECT_EQ(judge_replay(6, taken), ReplayVerdict::duplicate);
}

TEST(ReplayFilter, AMissingMessageIsAGapAndTheRestStillGoes) {
    std::uint32_t taken = 2;
    EXPECT_EQ(judge_replay(4, taken), ReplayVerdict::gap);  // 2 and 3 lost
    EXPECT_EQ(taken, 5u);
    EXPECT_EQ(judge_replay(5, taken), ReplayVerdict::deliver);
}

TEST(ReplayFilter, NothingDeliveredOnTheRail) {
    std::uint32_t taken = 0;
    EXPECT_EQ(judge_replay(0, taken), ReplayVerdict::deliver);
    EXPECT_EQ(judge_replay(1, taken), ReplayVerdict::deliver);
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
    EXPECT_EQ(*counts.of(a), 5u);
    EXPECT_EQ(*counts.of(b), 1u);
    EXPECT_EQ(*counts.of(c), 0u);  // a source never heard from
    EXPECT_EQ(counts.sources(), 3u);
    // judged through the same entry: the count goes on from there
    std::uint32_t *taken = counts.of(a);
    EXPECT_EQ(judge_replay(4, *taken), ReplayVerdict::duplicate);
    EXPECT_EQ(judge_replay(5, *taken), ReplayVerdict::deliver);
    counts.count(a);
    EXPECT_EQ(*counts.of(a), 7u);
}

TEST(SourceCounts, ANewConnectionCountsFromZeroAgain) {
    // Another process of the node got the QP number of an evicted INI QP: its first message says so.
    SourceCounts counts;
    const auto a = SourceCounts::key(7, 0x1234);
    for (int i = 0; i < 10; ++i) counts.count(a);
    counts.count(a, true);
    counts.count(a);
    EXPECT_EQ(*counts.of(a), 2u);
    std::uint32_t *taken = counts.of(a);
    EXPECT_EQ(judge_replay(2, *taken), ReplayVerdict::deliver);  // its third message, never delivered
}
