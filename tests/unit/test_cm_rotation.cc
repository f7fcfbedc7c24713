// SPDX-License-Identifier: BSD-3-Clause
// A rank that does not answer CONNECT (it left after its MPI_Finalize, or computes without a service thread, or
// its path is lost) is asked no more after a quarter of the connect timeout: the link tries another rank of the
// node its sends are for, within the same connect timeout, and tells the silent one, once, to drop what it may have
// made for the attempt.
#include "cm_test_net.h"

#include <gtest/gtest.h>

using namespace xrc;
using namespace xrc::cm_test;

namespace {

CmConfig quick() {
    CmConfig c;
    c.connect_timeout_us = 2000000;
    c.reciprocate = false;
    return c;
}

}  // namespace

TEST(ConnectionManagerRotation, ASilentRankIsReplacedByAnotherRankOfItsNode) {
    Net net(2, 2, quick());  // ranks 2, 3 on node 1
    net.lose = [](const Datagram &d) { return d.to == 2; };
    Message a, b;
    send(net[0], 2, a);  // the link would go through rank 2
    send(net[0], 3, b);
    const std::uint64_t start = net.clock;
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(link.owner(), 3u);
    EXPECT_EQ(net[0].cm().counters().cm_rotations, 1u);
    EXPECT_GE(net.clock - start, 500000u);  // not before a quarter of the connect timeout
    EXPECT_EQ(net[3].cm().owned_tgts(), 1u);
    EXPECT_EQ(ini_of(link)->posted.size(), 2u);  // both sends, rank 2's included (its SRQ is reached through 3)
    EXPECT_TRUE(net[0].failures.empty());
}

// Every rank of the node silent: one other rank is asked, and the link fails at the first attempt's deadline, not
// later, and no INI QP is left behind.
TEST(ConnectionManagerRotation, RotationNeverExtendsTheConnectTimeout) {
    CmConfig c = quick();
    Net net(2, 2, c);
    net.lose = [](const Datagram &d) { return d.to >= 2; };
    Message a, b;
    send(net[0], 2, a);
    send(net[0], 3, b);
    NodeLink &link = *net[0].peer(2).link;
    net.run(c.connect_timeout_us - 2000);
    EXPECT_EQ(link.state(), NodeLink::State::connecting);
    EXPECT_EQ(net[0].cm().counters().cm_rotations, 1u) << "the second rank has the rest of the timeout";
    net.run(3000);
    EXPECT_EQ(link.state(), NodeLink::State::failed) << "past the first attempt's deadline";
    EXPECT_TRUE(a.done && b.done);
    EXPECT_EQ(net.live_of(FakeQp::Kind::ini), 0u);
    EXPECT_EQ(net[0].failures.size(), 1u);
}

// The silent rank was only slow: its late ACCEPT is stale, and the CLOSE it was sent makes it drop its TGT QP (or
// makes none from a late copy of the CONNECT).
TEST(ConnectionManagerRotation, ASlowRankThatAnswersLateKeepsNothing) {
    Net net(2, 2, quick());
    bool slow = true;
    std::deque<Datagram> held;
    net.lose = [&](const Datagram &d) {
        if (slow && d.to == 2) {
            held.push_back(d);
            return true;
        }
        return false;
    };
    Message a, b;
    send(net[0], 2, a);
    send(net[0], 3, b);
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    ASSERT_EQ(link.owner(), 3u);
    slow = false;
    for (const Datagram &d : held) net.wire.push_back({d.from, d.to, d.bytes, net.clock});  // in the order sent
    net.run();
    EXPECT_EQ(net[2].cm().owned_tgts(), 0u);
    EXPECT_EQ(net.live_tgts(), 1u);  // rank 3's, for the connection made
    EXPECT_EQ(link.state(), NodeLink::State::connected);
}

// Every datagram between the nodes is late (a congested or rerouted path): the answer takes longer than a quarter of
// the connect timeout, so the first rank is taken for silent, but the second has the rest of the timeout and the
// link connects. (Before, each rank was given up in turn a quarter in, its late ACCEPT closed as stale, and the link
// failed at its deadline: campaign seed 8294, 0.52 s each way.)
TEST(ConnectionManagerRotation, APathSlowerThanTheRotationStillConnects) {
    CmConfig c = quick();
    Net net(2, 2, c);
    net.delay_us = 600000;  // a round trip of 1.2 s against a 2 s timeout
    Message a, b;
    send(net[0], 2, a);
    send(net[0], 3, b);
    net.run(c.connect_timeout_us + 1000000);
    NodeLink &link = *net[0].peer(2).link;
    EXPECT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(net[0].cm().counters().cm_rotations, 1u);
    EXPECT_TRUE(net[0].failures.empty());
}

// With one rank of the node wanted and none other attached, nobody else is asked: the deadline decides, as before.
TEST(ConnectionManagerRotation, WithNobodyElseToAskTheLinkWaitsForItsDeadline) {
    CmConfig c = quick();
    Net net(2, 2, c);
    net.lose = [](const Datagram &d) { return d.to == 2; };
    Message a;
    send(net[0], 2, a);
    net.run();
    EXPECT_EQ(net[0].peer(2).link->state(), NodeLink::State::failed);
    EXPECT_EQ(net[0].cm().counters().cm_rotations, 0u);
}
