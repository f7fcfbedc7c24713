// SPDX-License-Identifier: BSD-3-Clause
// A module's peers: owned until cleared, live by rank or by (job, rank), each other job counted until its last
// peer leaves, and an endpoint handed over twice released once.
#include "src/core/peer_directory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

namespace {

struct Endpoint {
    int id;
};

using Directory = xrc::PeerDirectory<Endpoint>;

}  // namespace

TEST(PeerDirectory, LiveByRankUntilRemovedOwnedUntilCleared) {
    Directory peers;
    Endpoint *a = peers.own(std::make_unique<Endpoint>(Endpoint{1}));
    Endpoint *b = peers.own(std::make_unique<Endpoint>(Endpoint{2}));
    peers.add(4, a);
    peers.add(9, b);
    EXPECT_EQ(peers.find(4), a);
    EXPECT_EQ(peers.find(5), nullptr);
    EXPECT_EQ(peers.live().size(), 2u);
    EXPECT_TRUE(peers.remove(4, a));
    EXPECT_FALSE(peers.remove(4, a));  // handed over twice: released once
    EXPECT_FALSE(peers.remove(9, a));  // not the one listed
    EXPECT_EQ(peers.find(4), nullptr);
    EXPECT_EQ(peers.live(), std::vector<Endpoint *>{b});
    EXPECT_EQ(peers.made().size(), 2u);  // still owned: work toward its node may still name it
    peers.clear();
    EXPECT_EQ(peers.find(9), nullptr);
    EXPECT_TRUE(peers.made().empty());
}

TEST(PeerDirectory, OtherJobsAreCountedUntilTheirLastPeerLeaves) {
    Directory peers;
    Endpoint *x = peers.own(std::make_unique<Endpoint>(Endpoint{1}));
    Endpoint *y = peers.own(std::make_unique<Endpoint>(Endpoint{2}));
    Endpoint *z = peers.own(std::make_unique<Endpoint>(Endpoint{3}));
    peers.add_other(7, 0, x);
    peers.add_other(7, 1, y);
    peers.add_other(8, 0, z);
    EXPECT_EQ(peers.find_other(7, 1), y);
    EXPECT_EQ(peers.find_other(8, 1), nullptr);
    EXPECT_EQ(peers.find(0), nullptr);  // another job's rank 0 is not ours
    EXPECT_TRUE(peers.live().empty());
    EXPECT_EQ(peers.remove_other(7, 0, x), Directory::Left::one);
    EXPECT_EQ(peers.remove_other(7, 0, x), Directory::Left::not_listed);
    EXPECT_EQ(peers.remove_other(7, 1, y), Directory::Left::last_of_job);
    EXPECT_EQ(peers.remove_other(8, 0, z), Directory::Left::last_of_job);
    peers.add_other(7, 0, x);  // the job met again counts from one
    EXPECT_EQ(peers.remove_other(7, 0, x), Directory::Left::last_of_job);
}
