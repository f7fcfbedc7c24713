// SPDX-License-Identifier: BSD-3-Clause
// A rail given up for good (ConnectionManager::abandon: DEVICE_FATAL, a port down past its grace): its sends fail
// once, nothing is retransmitted through it any more, the manager stops asking for ticks once nothing is left to
// do, and finalize has nothing to wait for on it (no CLOSE acknowledgement, no initiator's close).
#include "cm_test_net.h"

#include <gtest/gtest.h>

using namespace xrc;
using namespace xrc::cm_test;

namespace {

CmConfig capped_at_one() {
    CmConfig c;
    c.max_ini_qps = 1;
    c.reciprocate = false;
    c.connect_timeout_us = 2000000;
    return c;
}

}  // namespace

// Rank 0 has a CLOSE unacknowledged (its connection to node 1 was evicted) and a connection being made (node 2),
// every datagram lost (the device is dead), when the rail is given up.
TEST(ConnectionManagerAbandon, AnAbandonedRailStopsRetransmittingAndLetsFinalizeEnd) {
    Net net(3, 1, capped_at_one());
    // Rank 1 makes TGT QPs for rank 2 and rank 0 (finalize would wait for them to close them).
    Message to_rank1;
    send(net[2], 1, to_rank1);
    Message a;
    send(net[0], 1, a);
    net.run();
    NodeLink &to1 = *net[0].peer(1).link;
    ASSERT_EQ(to1.state(), NodeLink::State::connected);
    ASSERT_EQ(net[1].cm().owned_tgts(), 2u);
    complete_all(to1);
    std::size_t sent_by_0 = 0;
    net.lose = [&](const Datagram &d) {
        sent_by_0 += d.from == 0;
        return true;
    };
    to1.queue().clear_used();
    Message b;
    send(net[0], 2, b);  // evicts node 1's connection: its CLOSE goes unanswered; node 2's CONNECT too
    net[0].cm().tick();
    complete_all(to1);
    net.run(100000);
    NodeLink &to2 = *net[0].peer(2).link;
    ASSERT_EQ(to1.state(), NodeLink::State::idle);
    ASSERT_EQ(to2.state(), NodeLink::State::connecting);
    ASSERT_GT(sent_by_0, 0u);
    EXPECT_FALSE(b.done);

    net[0].cm().abandon(IBV_WC_WR_FLUSH_ERR);
    net[1].cm().abandon(IBV_WC_WR_FLUSH_ERR);
    // Its sends fail once, at once.
    EXPECT_TRUE(b.done);
    EXPECT_EQ(b.status, IBV_WC_WR_FLUSH_ERR);
    b.done = false;
    const std::size_t sent_at_abandon = sent_by_0;
    // Far past every timer: the connect timeout and CLOSE's give-up deadline included.
    for (int i = 0; i < 100; ++i) {
        net.clock += 1000000;
        (void)net[0].cm().tick_timers();
        if (net[0].cm().busy()) net[0].cm().tick();
        net.run(10000);
    }
    EXPECT_EQ(sent_by_0, sent_at_abandon) << "CONNECT/CLOSE still sent through a rail given up";
    EXPECT_FALSE(net[0].cm().busy()) << "an abandoned rail with nothing to do still wants ticks";
    EXPECT_EQ(net[0].cm().tick_timers(), UINT64_MAX);
    EXPECT_FALSE(b.done) << "a send failed twice";
    EXPECT_TRUE(net[0].failures.empty()) << "the BTL gave the rail up: no link failure is reported again";
    // Finalize: nothing of its own left, and nobody to wait for on this rail.
    net[0].cm().begin_finalize();
    net[0].cm().tick();
    EXPECT_TRUE(net[0].cm().own_work_finished());
    EXPECT_TRUE(net[0].cm().finished());
    EXPECT_FALSE(net[0].cm().busy());
    net[1].cm().begin_finalize();
    net[1].cm().tick();
    EXPECT_TRUE(net[1].cm().finished()) << "rank 2 cannot close through a rail given up";
    EXPECT_FALSE(net[1].cm().busy());
}

// Sends that queue after the rail was given up (a peer added later, a link never used) are refused at once: no QP
// is made on the rail and no datagram goes out; the send's owner fails over.
TEST(ConnectionManagerAbandon, NothingNewStartsOnAnAbandonedRail) {
    Net net(3, 1);
    net[0].cm().abandon(IBV_WC_WR_FLUSH_ERR);
    Message m;
    send(net[0], 2, m);
    net[0].cm().tick();
    net.run(1000000);
    EXPECT_TRUE(m.done);
    EXPECT_NE(m.status, IBV_WC_SUCCESS);
    EXPECT_EQ(net[0].cm().live_ini_qps(), 0u);
    EXPECT_EQ(net[2].cm().owned_tgts(), 0u);
    EXPECT_FALSE(net[0].cm().busy());
    // Eager mode's connect and an incoming CONNECT make nothing either.
    net[0].cm().connect(net[0].cm().link_for(net[1].address(), 1));
    Message n;
    send(net[1], 0, n);
    net.run(1000000);
    EXPECT_EQ(net[0].cm().live_ini_qps(), 0u);
    EXPECT_EQ(net[0].cm().owned_tgts(), 0u);
    EXPECT_FALSE(net[0].cm().busy());
}

// The rail given up comes back (its port active again): the manager makes connections again, its links start over
// (idle, their queues reset, their peers' next messages first messages), the host hears of each, and a send made
// then connects and goes out.
TEST(ConnectionManagerAbandon, ARailGivenUpThatComesBackConnectsAgain) {
    Net net(2, 1, capped_at_one());
    Message a;
    send(net[0], 1, a);
    net.run();
    NodeLink &link = *net[0].peer(1).link;
    complete_all(link);
    const std::uint32_t generation = link.generation();
    net[0].cm().abandon(IBV_WC_WR_FLUSH_ERR);
    ASSERT_TRUE(link.queue().broken());
    EXPECT_TRUE(net[0].cm().revive());
    EXPECT_FALSE(net[0].cm().abandoned());
    EXPECT_FALSE(net[0].cm().revive());  // once
    EXPECT_FALSE(link.queue().broken());
    EXPECT_EQ(link.state(), NodeLink::State::idle);
    EXPECT_EQ(net[0].peer(1).imm_flags, kImmFirst);
    ASSERT_EQ(net[0].revived.size(), 1u);
    EXPECT_EQ(net[0].revived[0], 1u);
    Message b;
    send(net[0], 1, b);
    net.run();
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_GT(link.generation(), generation);
    ASSERT_EQ(ini_of(link)->posted.size(), 1u);
    EXPECT_NE(imm_of(ini_of(link)->posted[0]) & kImmFirst, 0u);
    complete_all(link);
    EXPECT_EQ(b.status, IBV_WC_SUCCESS);
}

// The other end: its link to the node whose rail came back broke (its requests timed out, its peers' traffic went
// over another rail); a CONNECT from that node says the path works again, and the link starts over.
TEST(ConnectionManagerAbandon, ABrokenLinkStartsOverWhenItsNodeConnectsAgain) {
    Net net(2, 1, capped_at_one());
    Message a, b;
    send(net[0], 1, a);
    send(net[1], 0, b);
    net.run();
    NodeLink &link = *net[0].peer(1).link;
    complete_all(link);
    complete_all(*net[1].peer(0).link);
    Message lost;
    send(net[0], 1, lost);
    ibv_wc wc{};
    wc.wr_id = ini_of(link)->posted.back().wr_id;
    wc.qp_num = ini_of(link)->qp.qp_num;
    wc.status = IBV_WC_RETRY_EXC_ERR;
    link.queue().on_completion(wc);
    ASSERT_TRUE(link.queue().broken());
    EXPECT_TRUE(net[0].revived.empty());
    // Rank 1's rail was given up and is back: it connects to node 0 again.
    net[1].cm().abandon(IBV_WC_WR_FLUSH_ERR);
    ASSERT_TRUE(net[1].cm().revive());
    Message again;
    send(net[1], 0, again);
    net.run();
    ASSERT_EQ(net[0].revived.size(), 1u);
    EXPECT_FALSE(link.queue().broken());
    EXPECT_EQ(link.state(), NodeLink::State::idle);
    Message c;
    send(net[0], 1, c);
    net.run();
    EXPECT_EQ(link.state(), NodeLink::State::connected);
}
