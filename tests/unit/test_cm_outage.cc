// SPDX-License-Identifier: BSD-3-Clause
// An outage longer than the retry budget (btl_xrc_outage_limit): the HCA gives up on a link's requests, its queue
// hands back what was not acknowledged (SendQueue::hand_back_after), its peers' numbering starts again and they
// write into no eager ring any more, and the link connects again through the same rank, trying for up to the
// outage limit (the port may be down that long), not the connect timeout; past the limit it fails as before.
#include "cm_test_net.h"

#include <gtest/gtest.h>

using namespace xrc;
using namespace xrc::cm_test;

namespace {

CmConfig riding_outages() {
    CmConfig c;
    c.outage_limit_us = 60000000;
    c.connect_timeout_us = 2000000;
    c.reciprocate = false;
    return c;
}

// The HCA gave up on the request posted `index`-th on the link's current QP.
ibv_wc timeout_of(NodeLink &link, std::size_t index) {
    ibv_wc wc{};
    wc.wr_id = ini_of(link)->posted.at(index).wr_id;
    wc.qp_num = ini_of(link)->qp.qp_num;
    wc.status = IBV_WC_RETRY_EXC_ERR;
    return wc;
}

// What the port's progress does with it (port_progress.h): numbering first, then the queue, then the link.
void time_out(Process &p, NodeLink &link, std::size_t index) {
    const ibv_wc wc = timeout_of(link, index);
    ASSERT_TRUE(link.queue().would_requeue(wc));
    p.cm().restart_streams(link.queue(), true);
    EXPECT_EQ(link.queue().on_completion(wc), IBV_WC_RETRY_EXC_ERR);
    EXPECT_FALSE(link.queue().broken());
    p.cm().reconnect(link.queue(), true);
}

// Rank 0's link to `to`'s node, connected by a first message (acknowledged), and a second message posted on it.
NodeLink &connected_with_one_in_flight(Net &net, std::uint32_t to, Message &first, Message &in_flight) {
    send(net[0], to, first);
    net.run();
    NodeLink &link = *net[0].peer(to).link;
    complete_all(link);
    send(net[0], to, in_flight);
    return link;
}

// Rank 0's link to rank 1's node riding an outage: its second message timed out, the copy queued for the next
// connection, and the path lost (every datagram dropped) from here on.
NodeLink &riding_with_a_copy(Net &net, Message &first, Message &lost, Message &copy) {
    NodeLink &link = connected_with_one_in_flight(net, 1, first, lost);
    time_out(net[0], link, 1);
    send(net[0], 1, copy);
    net.lose = [](const Datagram &) { return true; };
    return link;
}

}  // namespace

TEST(ConnectionManagerOutage, ATimeoutHandsBackAndTheLinkConnectsAgainThroughTheSameRankOnceThePathIsBack) {
    Net net(2, 2, riding_outages());  // ranks 0, 1 on node 0; 2, 3 on node 1
    Message first;
    send(net[0], 2, first);
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    complete_all(link);
    const std::uint32_t generation = link.generation();
    const std::uint32_t first_qpn = ini_of(link)->qp.qp_num;
    net[0].peer(3).eager_state = EagerState::active;
    net[0].peer(2).eager_state = EagerState::counting;
    Message acked, lost, queued;
    send(net[0], 2, acked);
    send(net[0], 3, lost);
    send(net[0], 3, queued);
    time_out(net[0], link, 2);  // the first message was posted 0th
    EXPECT_EQ(acked.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(lost.done);
    EXPECT_EQ(lost.status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(queued.status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(lost.op.posted_on, source_key(link.tgt_qpn(), first_qpn));
    // Both peers' next messages start the next connection's count; the ring written into is paused until its
    // reader agrees where the writes stopped (asked once the copies are queued), and a peer without one may still
    // ask for one.
    EXPECT_EQ(net[0].peer(2).imm_flags, kImmFirst);
    EXPECT_EQ(net[0].peer(3).imm_flags, kImmFirst);
    EXPECT_EQ(net[0].peer(3).eager_state, EagerState::resume_due);  // the copies are queued: the next send asks
    EXPECT_EQ(net[0].peer(2).eager_state, EagerState::counting);
    // The owner sends its copy (numbered for the next connection); the path stays down past the connect timeout.
    Message copy;
    send(net[0], 3, copy);
    net.lose = [](const Datagram &) { return true; };
    net.run(10000000);
    EXPECT_EQ(link.state(), NodeLink::State::connecting);
    EXPECT_TRUE(net[0].failures.empty());
    net.lose = [](const Datagram &) { return false; };
    net.run();
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(link.owner(), 2u);
    EXPECT_GT(link.generation(), generation);
    ASSERT_NE(ini_of(link)->qp.qp_num, first_qpn);
    ASSERT_EQ(ini_of(link)->posted.size(), 1u);
    EXPECT_NE(imm_of(ini_of(link)->posted[0]) & kImmFirst, 0u);
    complete_all(link);
    EXPECT_EQ(copy.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(net[0].failures.empty());
    // The superseded TGT QP went when the new generation's CONNECT arrived: one per sender.
    EXPECT_EQ(net[2].cm().owned_tgts(), 1u);
}

TEST(ConnectionManagerOutage, ALinkThatCannotConnectAgainWithinTheOutageLimitFails) {
    Net net(2, 1, riding_outages());
    Message first, lost, copy;
    NodeLink &link = riding_with_a_copy(net, first, lost, copy);
    net.run(50000000);
    EXPECT_TRUE(net[0].failures.empty());  // 50 s of a 60 s limit
    net.run(20000000);
    EXPECT_EQ(link.state(), NodeLink::State::failed);
    EXPECT_EQ(net[0].failures.size(), 1u);
    EXPECT_TRUE(copy.done);
}

// Without an outage limit a timeout breaks the queue as before: the link fails and nothing connects again.
TEST(ConnectionManagerOutage, WithoutAnOutageLimitATimeoutBreaksTheQueue) {
    CmConfig c = riding_outages();
    c.outage_limit_us = 0;
    Net net(2, 1, c);
    Message first, lost;
    NodeLink &link = connected_with_one_in_flight(net, 1, first, lost);
    EXPECT_FALSE(link.queue().would_requeue(timeout_of(link, 1)));
    link.queue().on_completion(timeout_of(link, 1));
    EXPECT_TRUE(link.queue().broken());
    EXPECT_EQ(lost.status, IBV_WC_RETRY_EXC_ERR);
}

// Several rails: a link riding an outage toward a node that another rail reaches again fails at once (what it holds
// goes to its owners, who send it over that rail) instead of waiting up to the limit, and its node is probed, so
// that the link starts over when the path answers again. A node reached by no other rail keeps riding.
TEST(ConnectionManagerOutage, ARidingLinkHandsItsTrafficOverWhenAnotherRailReachesItsNode) {
    CmConfig c = riding_outages();
    c.probe_broken_links = true;
    Net net(2, 1, c);
    Message first, lost, copy;
    NodeLink &link = riding_with_a_copy(net, first, lost, copy);
    net.run(5000000);
    ASSERT_EQ(link.state(), NodeLink::State::connecting);
    std::vector<std::uint32_t> asked;
    net[0].cm().hand_over_riding([&asked](const NodeLink &l) {
        asked.push_back(l.node());
        return false;
    });
    net.run(1000000);
    EXPECT_EQ(asked, std::vector<std::uint32_t>{1});
    EXPECT_EQ(link.state(), NodeLink::State::connecting);  // no other rail: it rides on
    EXPECT_FALSE(copy.done);
    net[0].cm().hand_over_riding([](const NodeLink &) { return true; });
    net.run(1000);
    EXPECT_EQ(link.state(), NodeLink::State::failed);
    ASSERT_EQ(net[0].failures.size(), 1u);
    EXPECT_NE(net[0].failures[0].find("another rail reaches node 1 again"), std::string::npos) << net[0].failures[0];
    EXPECT_TRUE(copy.done);
    EXPECT_EQ(copy.status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_TRUE(link.queue().broken());
    // Failed, it rides no more: asked again, nothing changes.
    net[0].cm().hand_over_riding([](const NodeLink &) { return true; });
    net.run(1000);
    EXPECT_EQ(net[0].failures.size(), 1u);
    // The path answers again: a PROBE brings the link back.
    net.lose = [](const Datagram &) { return false; };
    serve_for(net, 5000000);
    EXPECT_EQ(net[0].revived, std::vector<std::uint32_t>{1});
    Message after;
    send(net[0], 1, after);
    net.run();
    EXPECT_EQ(link.state(), NodeLink::State::connected);
}
