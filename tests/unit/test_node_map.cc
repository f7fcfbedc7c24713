// SPDX-License-Identifier: BSD-3-Clause
// Rank -> node map and TGT QP ownership: deterministic, complete, balanced; unequal ranks per node.
#include "src/core/node_map.h"

#include <gtest/gtest.h>

#include <set>

using xrc::NodeIndex;
using xrc::NodeMap;

TEST(NodeMap, UnequalNodes) {
    // nodeA:2, nodeB:1, nodeC:3; the launch host "head" runs no rank.
    const NodeMap m("head,nodeA,nodeB,nodeC", {"nodeA", "nodeA", "nodeB", "nodeC", "nodeC", "nodeC"});
    ASSERT_EQ(m.node_count(), 3u);
    EXPECT_EQ(m.node_name(NodeIndex{0}), "nodeA");
    EXPECT_EQ(m.node_of(2), NodeIndex{1});
    EXPECT_EQ(m.ranks_on(NodeIndex{2}), (std::vector<std::uint32_t>{3, 4, 5}));
    EXPECT_EQ(m.tgt_owner(4, NodeIndex{1}), 2u);  // single-rank node owns every TGT QP
    EXPECT_EQ(m.tgt_owner(4, NodeIndex{2}), 4u);
}

TEST(NodeMap, ShortNamesAndMissingHosts) {
    const NodeMap m("nodeA.cluster,nodeB", {"nodeA", "nodeB.cluster", "nodeZ"});
    ASSERT_EQ(m.node_count(), 3u);
    EXPECT_EQ(m.node_of(0), NodeIndex{0});
    EXPECT_EQ(m.node_of(1), NodeIndex{1});
    EXPECT_EQ(m.node_of(2), NodeIndex{2});
    EXPECT_EQ(m.node_name(NodeIndex{2}), "nodeZ");
}

TEST(NodeMap, EveryTgtQpHasExactlyOneOwnerPerNode) {
    std::vector<std::string> hosts;
    for (int n = 0; n < 4; ++n)
        for (int p = 0; p < 3; ++p) hosts.push_back("n" + std::to_string(n));
    const NodeMap m("n0,n1,n2,n3", hosts);
    for (std::uint32_t n = 0; n < m.node_count(); ++n) {
        const NodeIndex node{n};
        std::multiset<std::uint32_t> owned;
        for (auto r : m.ranks_on(node))
            for (auto s : m.tgt_qps_owned_by(r)) owned.insert(s);
        ASSERT_EQ(owned.size(), m.rank_count());
        for (std::uint32_t s = 0; s < m.rank_count(); ++s) EXPECT_EQ(owned.count(s), 1u);
        for (auto r : m.ranks_on(node)) EXPECT_EQ(m.tgt_qps_owned_by(r).size(), 4u);  // 12 senders / 3 ranks
    }
}

TEST(NodeMap, OnDemandOwnersSpreadOverTheNodesRanksUnderBlockMapping) {
    // 4 nodes x 8 ranks: whichever rank of node 2 a sender wants first, the link goes through the rank at the
    // sender's own node-local index, so every rank of node 2 owns the TGT QPs of an equal share of the senders.
    std::vector<int> owned(32, 0);
    for (std::uint32_t sender = 0; sender < 32; ++sender) {
        if (sender / 8 == 2) continue;
        for (std::uint32_t peer = 16; peer < 24; ++peer) {
            const std::uint32_t owner = xrc::spread_owner_guess(peer, sender, 8, 32);
            EXPECT_EQ(owner / 8, 2u);
            EXPECT_EQ(owner % 8, sender % 8);
        }
        ++owned[xrc::spread_owner_guess(16, sender, 8, 32)];
    }
    for (std::uint32_t r = 16; r < 24; ++r) EXPECT_EQ(owned[r], 3);
    // A guess past the job (a smaller last node) keeps the peer; so does a job without local ranks.
    EXPECT_EQ(xrc::spread_owner_guess(29, 7, 8, 30), 29u);
    EXPECT_EQ(xrc::spread_owner_guess(5, 3, 0, 30), 5u);
}
