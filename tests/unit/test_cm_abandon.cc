// SPDX-License-Identifier: BSD-3-Clause
// A rail given up for good (ConnectionManager::abandon: DEVICE_FATAL, a port down past its grace): its sends fail
// once, nothing is retransmitted through it any more, the manager stops asking for ticks once nothing is left to
// do, and finalize has nothing to wait for on it (no CLOSE acknowledgement, no initiator's close). A rail given up
// that comes back, and a link that broke while the port stayed up, start over (revive, a CONNECT or a PROBE's answer
// from the node).
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

namespace {

CmConfig probing() {
    CmConfig c = capped_at_one();
    c.probe_broken_links = true;
    c.first_probe_us = 1000000;
    c.max_probe_us = 4000000;
    return c;
}

// The last send posted on `link` fails with RETRY_EXC_ERR (a path lost past the retry budget): its queue breaks,
// and progress tells the manager (PortTransport::broke).
void break_with_timeout(ConnectionManager &cm, NodeLink &link) {
    ibv_wc wc{};
    wc.wr_id = ini_of(link)->posted.back().wr_id;
    wc.qp_num = ini_of(link)->qp.qp_num;
    wc.status = IBV_WC_RETRY_EXC_ERR;
    link.queue().on_completion(wc);
    ASSERT_TRUE(link.queue().broken());
    cm.queue_broke(link.queue());
}

// Ranks 0 and 1 (one per node) connected both ways, every send completed.
void connect_both_ways(Net &net) {
    Message a, b;
    send(net[0], 1, a);
    send(net[1], 0, b);
    net.run();
    complete_all(*net[0].peer(1).link);
    complete_all(*net[1].peer(0).link);
}

// A send from `from` to `to` connects `link` (from's, idle) and goes out.
void expect_a_send_goes_out(Net &net, std::uint32_t from, std::uint32_t to) {
    NodeLink &link = *net[from].peer(to).link;
    Message m;
    send(net[from], to, m);
    net.run();
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    complete_all(link);
    EXPECT_EQ(m.status, IBV_WC_SUCCESS);
}

}  // namespace

// Both ends' connections broke while both ports stayed up (the path between them was lost past the retry budget):
// no port event will ever say the path is back. Each end asks the other, with backoff, while nothing answers; once
// the path works, the answer (and the other's own probe) start both links over, the hosts hear of it (they move
// the traffic back), and a send connects and goes out.
TEST(ConnectionManagerProbe, ALinkBrokenWithThePortUpComesBackWhenItsNodeAnswers) {
    Net net(2, 1, probing());
    connect_both_ways(net);
    NodeLink &link0 = *net[0].peer(1).link;
    NodeLink &link1 = *net[1].peer(0).link;
    Message lost0, lost1;
    send(net[0], 1, lost0);
    send(net[1], 0, lost1);
    break_with_timeout(net[0].cm(), link0);
    break_with_timeout(net[1].cm(), link1);
    // The path is still lost: probes go, with backoff, and nothing starts over.
    std::size_t datagrams = 0;
    net.lose = [&datagrams](const Datagram &) {
        ++datagrams;
        return true;
    };
    serve_for(net, 8000000);
    EXPECT_GE(datagrams, 4u);  // at 1, 3 and 7 s, from each end
    EXPECT_LE(datagrams, 8u);  // not one per tick
    EXPECT_TRUE(net[0].revived.empty());
    EXPECT_TRUE(net[1].revived.empty());
    EXPECT_TRUE(link0.queue().broken());
    // The path is back: the next probe is answered.
    net.lose = [](const Datagram &) { return false; };
    serve_for(net, 5000000);
    ASSERT_EQ(net[0].revived.size(), 1u);
    ASSERT_EQ(net[1].revived.size(), 1u);
    EXPECT_FALSE(link0.queue().broken());
    EXPECT_FALSE(link1.queue().broken());
    EXPECT_EQ(link0.state(), NodeLink::State::idle);
    EXPECT_EQ(net[0].peer(1).imm_flags, kImmFirst);
    expect_a_send_goes_out(net, 0, 1);
    // Nothing is probed any more.
    datagrams = 0;
    net.lose = [&datagrams](const Datagram &) {
        ++datagrams;
        return false;
    };
    serve_for(net, 10000000);
    EXPECT_EQ(datagrams, 0u);
}

// Off unless asked for (one rail: nothing else could carry the traffic, and the job ends), and never for a rail given
// up (its port's return revives it), a dead node, or while finalizing.
TEST(ConnectionManagerProbe, ProbesOnlyWhenAskedAndWorthIt) {
    for (int variant = 0; variant < 4; ++variant) {
        Net net(2, 1, variant == 0 ? capped_at_one() : probing());
        Message a;
        send(net[0], 1, a);
        net.run();
        NodeLink &link = *net[0].peer(1).link;
        complete_all(link);
        Message lost;
        send(net[0], 1, lost);
        break_with_timeout(net[0].cm(), link);
        if (variant == 1) net[0].cm().abandon(IBV_WC_WR_FLUSH_ERR);
        if (variant == 2) net[0].cm().node_died(1);
        if (variant == 3) net[0].cm().begin_finalize();
        std::size_t datagrams = 0;
        net.lose = [&datagrams](const Datagram &d) {
            datagrams += d.from == 0;
            return false;
        };
        serve_for(net, 5000000);
        EXPECT_EQ(datagrams, 0u) << variant;
        EXPECT_TRUE(net[0].revived.empty()) << variant;
    }
}

// An answer that does not match the broken link (another generation: a late answer to a probe of an earlier break)
// starts nothing; a PROBE_ACK nobody asked for neither.
TEST(ConnectionManagerProbe, AnUnaskedAnswerStartsNothing) {
    Net net(2, 1, probing());
    Message a;
    send(net[0], 1, a);
    net.run();
    NodeLink &link = *net[0].peer(1).link;
    complete_all(link);
    CmMessage ack;
    ack.type = CmType::ProbeAck;
    ack.jobid = 7;
    ack.src_rank = 1;
    ack.dst_rank = 0;
    ack.token = net[0].address().token;
    ack.generation = link.generation();
    const auto deliver = [&](const CmMessage &m) {
        net[0].cm().on_datagram(encode_cm(m), net[1].address().lid, net[1].address().cm_qpn);
        net.run();
    };
    deliver(ack);  // the link is fine: not probing
    EXPECT_TRUE(net[0].revived.empty());
    Message lost;
    send(net[0], 1, lost);
    break_with_timeout(net[0].cm(), link);
    ack.generation = link.generation() + 1;
    deliver(ack);
    EXPECT_TRUE(net[0].revived.empty());
    EXPECT_TRUE(link.queue().broken());
    ack.generation = link.generation();
    deliver(ack);
    EXPECT_EQ(net[0].revived.size(), 1u);
}

// A connection that could not be made (nothing answered within the connect timeout: the path was lost) is probed
// too, and starts over once its node answers.
TEST(ConnectionManagerProbe, AConnectionNeverMadeIsProbedToo) {
    Net net(2, 1, probing());
    net.lose = [](const Datagram &) { return true; };
    Message a;
    send(net[0], 1, a);
    net.run(3000000);
    NodeLink &link = *net[0].peer(1).link;
    ASSERT_EQ(link.state(), NodeLink::State::failed);
    EXPECT_NE(a.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(net[0].revived.empty());
    net.lose = [](const Datagram &) { return false; };
    serve_for(net, 4000000);
    ASSERT_EQ(net[0].revived.size(), 1u);
    expect_a_send_goes_out(net, 0, 1);
}

// A process whose port moved to a new LID while the path to another node was lost: its ADDRESS went unanswered and
// was given up, and that node drops everything from the new LID. Its PROBE carries the ADDRESS again, so the node
// learns the LID, answers, and both links start over.
TEST(ConnectionManagerProbe, AProbeTellsANewLidThatWasNeverHeard) {
    Net net(2, 1, probing());
    connect_both_ways(net);
    NodeLink &link1 = *net[1].peer(0).link;
    Message lost;
    send(net[1], 0, lost);
    break_with_timeout(net[1].cm(), link1);
    net.lose = [](const Datagram &) { return true; };
    const std::uint16_t old = net[1].address().lid;
    net[1].take_lid(0x40);
    net[1].cm().announce_lid(old, 0x40);
    serve_for(net, 3000000);  // past the connect timeout: the ADDRESS is given up
    EXPECT_EQ(net[1].cm().unanswered_addresses(), 0u);
    EXPECT_EQ(net[0].lid_seen(1), old);
    net.lose = [](const Datagram &) { return false; };
    serve_for(net, 40000000);
    EXPECT_EQ(net[0].lid_seen(1), 0x40);
    ASSERT_EQ(net[1].revived.size(), 1u);
    expect_a_send_goes_out(net, 1, 0);
}
