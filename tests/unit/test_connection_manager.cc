// SPDX-License-Identifier: BSD-3-Clause
// The connection manager at message level, without MPI or a device: processes on simulated nodes exchange its
// datagrams through a fake network that can lose, duplicate, delay and reorder them, over fake QPs that record
// what would reach the device. Connect on first send, loss and retransmission, duplicates, both sides connecting
// at once, forged and garbage datagrams, eviction under a cap with close on both sides, stale requests, a peer
// that never answers, first-message handles, and draining at finalize.
#include "cm_test_net.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <set>

using namespace xrc;
using namespace xrc::cm_test;

namespace {

// One INI QP per process at most, and no reverse connection on accept: every second node evicts the first.
CmConfig capped_at_one() {
    CmConfig c;
    c.max_ini_qps = 1;
    c.reciprocate = false;
    return c;
}
// Ranks 0..5 on nodes 0..2, two per node. Rank 0 connects to node 1 through ranks 2 and 3 (rank 2 owns the TGT
// QP), `connected` sees that link, then rank 0 sends to rank 4 on node 2, which under the cap evicts node 1's
// connection; returns the link once it has drained and closed.
NodeLink &connect_then_evict(Net &net, Message &a, Message &b, Message &d,
                             const std::function<void(NodeLink &)> &connected = nullptr) {
    send(net[0], 2, a);
    send(net[0], 3, b);
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    if (connected) connected(link);
    complete_all(link);
    link.queue().clear_used();
    send(net[0], 4, d);
    net.run();
    complete_all(link);
    net.run();
    return link;
}

}  // namespace

TEST(ConnectionManager, FirstSendConnectsAndQueuedSendsGoOutInOrder) {
    Net net(2, 2);
    Message a, b;
    send(net[0], 2, a);
    send(net[0], 3, b);  // another rank of the same node: same link, no second handshake
    NodeLink &link = *net[0].peer(2).link;
    // The send only records the link (it may hold the send queues' lock); the next tick makes the INI QP.
    EXPECT_EQ(link.state(), NodeLink::State::idle);
    EXPECT_TRUE(net[0].cm().busy());
    net[0].cm().tick();
    EXPECT_EQ(link.state(), NodeLink::State::connecting);
    EXPECT_EQ(&link, net[0].peer(3).link);
    net.run();
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    FakeQp *ini = ini_of(link);
    ASSERT_NE(ini, nullptr);
    ASSERT_EQ(ini->posted.size(), 2u);
    EXPECT_EQ(ini->posted[0].qp_type.xrc.remote_srqn, net[2].address().srqs.front().srq_num);
    EXPECT_EQ(ini->posted[1].qp_type.xrc.remote_srqn, net[3].address().srqs.front().srq_num);
    // Both are the first message to their receiver over this connection.
    EXPECT_TRUE(imm_of(ini->posted[0]) & kImmFirst);
    EXPECT_TRUE(imm_of(ini->posted[1]) & kImmFirst);
    EXPECT_EQ(net[2].cm().owned_tgts(), 1u);  // the first destination made the TGT QP
    EXPECT_EQ(net[3].cm().owned_tgts(), 0u);
    EXPECT_EQ(net[0].cm().counters().connection_attempts, 1u);
    Message c;
    send(net[0], 2, c);
    ASSERT_EQ(ini->posted.size(), 3u);
    EXPECT_FALSE(imm_of(ini->posted[2]) & kImmFirst);  // not the first any more
    complete_all(link);
    EXPECT_TRUE(a.done && b.done && c.done);
    EXPECT_EQ(a.status, IBV_WC_SUCCESS);
}

TEST(ConnectionManager, ReceiverHoldsItsOwnHandleFromItsFirstMessage) {
    Net net(2, 2);
    Message a;
    send(net[0], 3, a);  // rank 3 is the owner
    Message b;
    send(net[0], 2, b);
    net.run();
    NodeLink &link = *net[0].peer(3).link;
    const std::uint32_t tgt = link.tgt_qpn();
    EXPECT_EQ(net.tgt_users[tgt], 1);
    net[3].cm().hold_tgt(tgt, link.ini_qpn());  // the owner holds it already
    EXPECT_EQ(net.tgt_users[tgt], 1);
    net[2].cm().hold_tgt(tgt, link.ini_qpn());
    EXPECT_EQ(net.tgt_users[tgt], 2);
    net[2].cm().hold_tgt(tgt, link.ini_qpn());  // once
    EXPECT_EQ(net.tgt_users[tgt], 2);
    net[2].cm().hold_tgt(tgt, link.ini_qpn() + 99);  // not this QP's initiator: nothing opened
    EXPECT_EQ(net[2].cm().held_handles(), 0u);       // the stale handle was dropped, no new one made
    net[2].cm().hold_tgt(tgt, link.ini_qpn());
    EXPECT_EQ(net[2].cm().held_handles(), 1u);
}

TEST(ConnectionManager, LostDatagramsAreRetransmittedAndDuplicatesAnsweredWithTheSameQp) {
    Net net(2, 1);
    int dropped = 0;
    net.lose = [&](const Datagram &) { return dropped++ < 5; };  // CONNECTs and ACCEPTs alike
    net.copies = [](const Datagram &) { return 2; };             // and everything that gets through, twice
    Message a;
    send(net[0], 1, a);
    net.run();
    NodeLink &link = *net[0].peer(1).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_GT(net[0].cm().counters().cm_retransmissions, 0u);
    EXPECT_GT(net[1].cm().counters().cm_duplicates + net[0].cm().counters().cm_duplicates, 0u);
    EXPECT_EQ(net[1].cm().owned_tgts(), 1u);  // one TGT QP however many CONNECTs arrived
    EXPECT_EQ(net.live_tgts(), 2u);           // (and one for rank 1's connection back)
    EXPECT_EQ(ini_of(link)->peer_qpn, link.tgt_qpn());
}

TEST(ConnectionManager, ReorderedAndDelayedDatagramsStillConnectOnce) {
    Net net(4, 2);
    net.reorder = true;
    net.delay_us = 30000;
    std::vector<std::unique_ptr<Message>> msgs;
    for (std::uint32_t s = 0; s < 8; ++s)
        for (std::uint32_t r = 0; r < 8; ++r) {
            if (s / 2 == r / 2) continue;
            msgs.push_back(std::make_unique<Message>());
            send(net[s], r, *msgs.back());
        }
    net.run();
    // A connection storm from cold: every process reaches the three other nodes, one INI QP each, and every node
    // holds exactly one TGT QP per remote sender.
    for (std::uint32_t s = 0; s < 8; ++s) {
        EXPECT_EQ(net[s].cm().live_ini_qps(), 3u) << s;
        EXPECT_EQ(net[s].cm().counters().connection_failures, 0u);
    }
    EXPECT_EQ(net.live_tgts(), 8u * 3);
}

TEST(ConnectionManager, BothSidesConnectingAtOnceMakeTwoIndependentConnections) {
    Net net(2, 1);
    Message a, b;
    send(net[0], 1, a);
    send(net[1], 0, b);
    net.run();
    EXPECT_EQ(net[0].peer(1).link->state(), NodeLink::State::connected);
    EXPECT_EQ(net[1].peer(0).link->state(), NodeLink::State::connected);
    EXPECT_EQ(net.live_tgts(), 2u);
    EXPECT_EQ(net[0].cm().counters().connection_failures + net[1].cm().counters().connection_failures, 0u);
}

TEST(ConnectionManager, AcceptingStartsTheReverseConnection) {
    Net net(2, 1);
    Message a;
    send(net[0], 1, a);
    net.run();
    NodeLink &back = net[1].cm().link_for(net[0].address(), 0);
    EXPECT_EQ(back.state(), NodeLink::State::connected);  // before rank 1 sends anything
    Message reply;
    send(net[1], 0, reply);
    EXPECT_EQ(ini_of(back)->posted.size(), 1u);  // posted at once, no handshake in the way
}

TEST(ConnectionManager, ForgedGarbageAndForeignDatagramsCreateNothing) {
    Net net(2, 1);
    ConnectionManager &cm = net[1].cm();
    const PortAddress &from = net[0].address();
    CmMessage m;
    m.type = CmType::Connect;
    m.jobid = 7;
    m.src_rank = 0;
    m.dst_rank = 1;
    m.token = net[1].address().token;
    m.generation = 1;
    m.ini_qpn = 0x4242;
    auto deliver = [&](const CmMessage &x, std::uint16_t slid, std::uint32_t qpn) {
        const CmBytes b = encode_cm(x);
        cm.on_datagram(b, slid, qpn);
    };
    CmMessage bad = m;
    bad.token ^= 1;  // another job's (or a guessed) token
    deliver(bad, from.lid, from.cm_qpn);
    bad = m;
    bad.jobid = 8;
    deliver(bad, from.lid, from.cm_qpn);
    bad = m;
    bad.dst_rank = 0;
    deliver(bad, from.lid, from.cm_qpn);
    deliver(m, from.lid + 1, from.cm_qpn);  // right words, from an address that is not rank 0's
    deliver(m, from.lid, from.cm_qpn + 1);
    bad = m;
    bad.src_rank = 999;  // no such rank
    deliver(bad, from.lid, from.cm_qpn);
    const CmBytes good = encode_cm(m);
    for (std::size_t n = 0; n < good.size(); ++n) cm.on_datagram(std::span(good.data(), n), from.lid, from.cm_qpn);
    std::mt19937 rng(7);
    for (int i = 0; i < 2000; ++i) {
        CmBytes junk;
        for (auto &byte : junk) byte = static_cast<std::uint8_t>(rng());
        cm.on_datagram(junk, from.lid, from.cm_qpn);
        // A bit flipped anywhere in who it is from, for, or the token (a flip in the generation or QP number
        // would be a different, genuine-looking request, and so would one in the sender's port position at
        // bytes 20-23, which only messages use).
        CmBytes flipped = good;
        std::size_t at = rng() % 28;
        if (at >= 20) at += 4;
        flipped[at] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
        cm.on_datagram(flipped, from.lid, from.cm_qpn);
    }
    EXPECT_EQ(cm.owned_tgts() > 0, false) << "a forged request made a TGT QP";
    EXPECT_EQ(net.live_tgts(), 0u);
    EXPECT_GE(cm.counters().cm_rejected, 6u + good.size());
    deliver(m, from.lid, from.cm_qpn);  // the genuine article is accepted
    EXPECT_EQ(cm.owned_tgts(), 1u);
}

TEST(ConnectionManager, EvictionUnderTheCapDrainsClosesBothSidesAndReconnects) {
    const CmConfig c = capped_at_one();
    Net net(3, 1, c);
    Message a;
    send(net[0], 1, a);
    net.run();
    NodeLink &to1 = *net[0].peer(1).link;
    ASSERT_EQ(to1.state(), NodeLink::State::connected);
    const std::uint32_t first_tgt = to1.tgt_qpn(), first_gen = to1.generation();
    // An inline send nobody waits for: unsignaled, so only a later signaled request can retire it.
    SendOp inline_op;
    net[0].peer(1).prepare_srq(inline_op, nullptr, 0, 0, make_imm(0x41));
    ASSERT_EQ(to1.queue().try_post(inline_op), 0);
    ASSERT_TRUE(to1.queue().needs_fence());
    // Rank 0 now wants node 2: node 1's connection has to go first, and the fence retires what is outstanding
    // before the QP is destroyed: nothing in flight is lost.
    to1.queue().clear_used();
    Message b;
    send(net[0], 2, b);
    NodeLink &to2 = *net[0].peer(2).link;
    EXPECT_EQ(to2.state(), NodeLink::State::waiting);
    net[0].cm().tick();
    EXPECT_EQ(to1.state(), NodeLink::State::draining);
    EXPECT_TRUE(imm_of(ini_of(to1)->posted.back()) & kImmNop);
    EXPECT_FALSE(a.done);
    complete_all(to1);
    EXPECT_TRUE(a.done);
    EXPECT_EQ(a.status, IBV_WC_SUCCESS);
    net.run();
    EXPECT_EQ(to1.state(), NodeLink::State::idle);
    EXPECT_EQ(to2.state(), NodeLink::State::connected);
    EXPECT_LE(net[0].cm().counters().ini_qps_peak, 1u);
    EXPECT_EQ(net[1].cm().owned_tgts(), 0u);  // closed on the remote side too
    EXPECT_EQ(net.tgt_users[first_tgt], 0);
    EXPECT_EQ(net[0].cm().counters().evictions, 1u);
    // Back to node 1: a new connection, with a new generation.
    to2.queue().clear_used();
    complete_all(to2);
    Message c2;
    send(net[0], 1, c2);
    net.run();
    complete_all(to2);
    net.run();
    EXPECT_EQ(to1.state(), NodeLink::State::connected);
    EXPECT_GT(to1.generation(), first_gen);
    EXPECT_NE(to1.tgt_qpn(), first_tgt);
    EXPECT_EQ(net.live_of(FakeQp::Kind::ini), 1u);
}

TEST(ConnectionManager, ClosingTellsEveryReceiverThatMayHoldAHandle) {
    const CmConfig c = capped_at_one();
    Net net(3, 2, c);
    Message a, b, d;
    std::uint32_t tgt = 0;
    connect_then_evict(net, a, b, d, [&](NodeLink &link) {
        net[3].cm().hold_tgt(link.tgt_qpn(), link.ini_qpn());  // rank 3's first message arrived
        tgt = link.tgt_qpn();
        EXPECT_EQ(net.tgt_users[tgt], 2);
    });
    EXPECT_EQ(net.tgt_users[tgt], 0) << "a handle on the closed connection's TGT QP was left behind";
    EXPECT_EQ(net[3].cm().held_handles(), 0u);
}

TEST(ConnectionManager, ALateCopyOfAClosedConnectionsConnectIsIgnored) {
    const CmConfig c = capped_at_one();
    Net net(3, 1, c);
    std::vector<Datagram> seen;
    net.lose = [&](const Datagram &d) {
        seen.push_back(d);
        return false;
    };
    Message a;
    send(net[0], 1, a);
    net.run();
    const CmBytes first_connect = seen.front().bytes;
    complete_all(*net[0].peer(1).link);
    net[0].peer(1).link->queue().clear_used();
    Message b;
    send(net[0], 2, b);
    net.run();
    ASSERT_EQ(net[1].cm().owned_tgts(), 0u);
    net[1].cm().on_datagram(first_connect, net[0].address().lid, net[0].address().cm_qpn);
    EXPECT_EQ(net[1].cm().owned_tgts(), 0u);
    EXPECT_GE(net[1].cm().counters().cm_stale, 1u);
}

TEST(ConnectionManager, APeerThatNeverAnswersFailsTheLinkAndItsQueuedSends) {
    CmConfig c;
    c.connect_timeout_us = 2000000;
    Net net(2, 1, c);
    net.lose = [](const Datagram &d) { return d.to == 1; };
    Message a, b;
    send(net[0], 1, a);
    send(net[0], 1, b);
    net.run();
    NodeLink &link = *net[0].peer(1).link;
    EXPECT_EQ(link.state(), NodeLink::State::failed);
    EXPECT_TRUE(a.done && b.done);
    EXPECT_EQ(a.status, IBV_WC_RETRY_EXC_ERR);
    ASSERT_EQ(net[0].failures.size(), 1u);
    EXPECT_NE(net[0].failures[0].find("no answer from rank 1"), std::string::npos) << net[0].failures[0];
    EXPECT_GT(net[0].cm().counters().cm_retransmissions, 3u);
    EXPECT_EQ(net.live_of(FakeQp::Kind::ini), 0u);  // the INI QP was not left behind
    Message late;
    Peer &p = net[0].peer(1);
    p.prepare_srq(late.op, late.data, 8, 0, make_imm(1));
    late.op.on_complete = message_done;
    EXPECT_NE(p.queue->post_or_queue(late.op), 0);  // the failure is final, reported once
}

TEST(ConnectionManager, ARejectedConnectionFailsWithTheTargetsReason) {
    Net net(2, 1);
    net[1].fail_tgt_creation = true;
    Message a;
    send(net[0], 1, a);
    net.run();
    ASSERT_EQ(net[0].failures.size(), 1u);
    EXPECT_NE(net[0].failures[0].find("cannot create an XRC receive QP"), std::string::npos) << net[0].failures[0];
    EXPECT_EQ(a.status, IBV_WC_RETRY_EXC_ERR);
}

TEST(ConnectionManager, FinalizeDrainsEverythingAcceptedIncludingConnectionsStillBeingMade) {
    Net net(3, 1);
    Message a, b;
    send(net[0], 1, a);
    net.run();
    send(net[0], 2, b);  // connecting when finalize begins
    net[0].cm().begin_finalize();
    EXPECT_FALSE(net[0].cm().drained());
    net.run(100000);
    NodeLink &to1 = *net[0].peer(1).link, &to2 = *net[0].peer(2).link;
    EXPECT_EQ(to2.state(), NodeLink::State::draining);  // it connected, posted b, and drains
    EXPECT_EQ(ini_of(to2)->posted.size(), 1u);
    complete_all(to1);
    complete_all(to2);
    net.run();
    EXPECT_TRUE(net[0].cm().drained());
    EXPECT_TRUE(a.done && b.done);
    EXPECT_EQ(a.status, IBV_WC_SUCCESS);
    EXPECT_EQ(b.status, IBV_WC_SUCCESS);
    EXPECT_EQ(net[0].cm().live_ini_qps(), 0u);
    // Rank 2's connection back toward node 0 was refused quietly (it carried nothing); a send to the finalized
    // process is refused with the reason.
    EXPECT_EQ(net[2].failures.size(), 0u);
    Message c;
    send(net[2], 0, c);
    net.run();
    ASSERT_EQ(net[2].failures.size(), 1u);
    EXPECT_NE(net[2].failures[0].find("finalizing"), std::string::npos) << net[2].failures[0];
    EXPECT_EQ(c.status, IBV_WC_RETRY_EXC_ERR);
}

TEST(ConnectionManager, FinalizeEndsOnlyWhenEveryInitiatorClosedTheTgtQpsItHad) {
    Net net(2, 1);
    Message a;
    send(net[0], 1, a);
    net.run();
    complete_all(*net[0].peer(1).link);
    // Rank 1 finalizes first: it made a TGT QP for rank 0, which rank 0 may still be draining toward.
    net[1].cm().begin_finalize();
    net.run();
    for (NodeLink *l : {&net[1].cm().link_for(net[0].address(), 0)}) complete_all(*l);
    net.run();
    EXPECT_TRUE(net[1].cm().drained());
    EXPECT_FALSE(net[1].cm().finished()) << "rank 1 may not destroy the TGT QP rank 0 still uses";
    EXPECT_EQ(net[1].cm().owned_tgts(), 1u);
    net[0].cm().begin_finalize();
    net.run();
    complete_all(*net[0].peer(1).link);
    net.run();
    EXPECT_TRUE(net[0].cm().finished());
    EXPECT_TRUE(net[1].cm().finished());
    EXPECT_EQ(net.live_tgts(), 0u);
    EXPECT_EQ(net[0].failures.size() + net[1].failures.size(), 0u);
}

TEST(ConnectionManager, AnOwnerThatStopsWaitingForASlowInitiatorTellsItAndLeaves) {
    Net net(2, 1);
    Message a;
    send(net[0], 1, a);
    net.run();
    complete_all(*net[0].peer(1).link);
    // Rank 1 finalizes; rank 0 is alive but far from its own finalize.
    net[1].cm().begin_finalize();
    net.run();
    complete_all(net[1].cm().link_for(net[0].address(), 0));
    net.run();
    EXPECT_TRUE(net[1].cm().own_work_finished());
    EXPECT_FALSE(net[1].cm().finished());
    const std::string left = net[1].cm().leave_initiators();
    EXPECT_NE(left.find("rank 0's INI QP"), std::string::npos) << left;
    EXPECT_FALSE(net[1].cm().finished()) << "the TGT QP stays until rank 0 answered";
    EXPECT_EQ(net[1].cm().owned_tgts(), 1u);
    net.run(100000);
    // Nothing was outstanding on rank 0's link: it answered at once, and rank 1 dropped the TGT QP.
    EXPECT_TRUE(net[1].cm().finished());
    EXPECT_EQ(net[1].cm().owned_tgts(), 0u);
    EXPECT_EQ(net[1].cm().drop_initiators(), "");
    // Rank 1 is gone: nothing reaches it any more. Rank 0's close neither fences nor waits for a CLOSE_ACK.
    net.lose = [](const Datagram &d) { return d.to == 1; };
    net[0].cm().begin_finalize();
    net.run(1000000);
    EXPECT_TRUE(net[0].cm().finished()) << "rank 0 waited for the rank that left";
    EXPECT_EQ(net[0].cm().live_ini_qps(), 0u);
    EXPECT_EQ(net.live_tgts(), 0u);
    EXPECT_EQ(net[0].failures.size() + net[1].failures.size(), 0u);
    EXPECT_TRUE(a.done);
}

TEST(ConnectionManager, AFinalizingOwnerIsReplacedByAnotherRankOfItsNode) {
    const CmConfig c = capped_at_one();
    Net net(3, 2, c);
    Message a, b, d;
    NodeLink &link = connect_then_evict(net, a, b, d);
    ASSERT_EQ(link.state(), NodeLink::State::idle);
    net[2].cm().begin_finalize();  // rank 2 is leaving; rank 3 on its node is not
    complete_all(*net[0].peer(4).link);
    Message e;
    send(net[0], 3, e);
    net.run();
    EXPECT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(link.owner(), 3u);
    EXPECT_EQ(net[0].failures.size(), 0u);
    EXPECT_EQ(net[3].cm().owned_tgts(), 1u);
}

// Rank 0's link to node 1 (ranks 2 and 3) evicted, both ranks of node 1 in MPI_Finalize, a send `e` for rank 2
// queued on the link; `rank0_finalizing`: rank 0 begins its MPI_Finalize too. Then the network runs.
static NodeLink &queued_for_a_finalizing_node(Net &net, Message &e, bool rank0_finalizing) {
    Message a, b, d;
    NodeLink &link = connect_then_evict(net, a, b, d);
    EXPECT_EQ(link.state(), NodeLink::State::idle);
    net[2].cm().begin_finalize();
    net[3].cm().begin_finalize();
    complete_all(*net[0].peer(4).link);
    send(net[0], 2, e);
    if (rank0_finalizing) net[0].cm().begin_finalize();
    net.run();
    return link;
}

// Both sides in MPI_Finalize: a send still queued for a rank that refuses as finalizing (here an answer of the
// PML's for a request that completed) is dropped, completed as flushed, and no connection failure is reported (the
// process would exit 1 for work not delivered). A process still running hears of it as before.
TEST(ConnectionManager, WhileFinalizingSendsQueuedOnlyForFinalizingRanksAreDroppedNotFailed) {
    Net net(3, 2, capped_at_one());
    Message e;
    NodeLink &link = queued_for_a_finalizing_node(net, e, true);
    EXPECT_TRUE(e.done);
    EXPECT_EQ(e.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(net[0].failures.size(), 0u) << (net[0].failures.empty() ? "" : net[0].failures.front());
    EXPECT_EQ(net[0].cm().counters().connection_failures, 0u);
    EXPECT_EQ(link.state(), NodeLink::State::idle);
    EXPECT_EQ(net[2].cm().owned_tgts() + net[3].cm().owned_tgts(), 0u);
}

TEST(ConnectionManager, ARunningProcessStillHearsThatEveryRankOfANodeRefusedAsFinalizing) {
    Net net(3, 2, capped_at_one());
    Message e;
    (void)queued_for_a_finalizing_node(net, e, false);
    EXPECT_TRUE(e.done);
    EXPECT_NE(e.status, IBV_WC_SUCCESS);
    EXPECT_NE(e.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(net[0].failures.size(), 1u);
}

TEST(ConnectionManager, AStormFromColdAtEightNodesByFourConnectsEveryone) {
    Net net(8, 4);
    net.reorder = true;
    int n = 0;
    net.lose = [&](const Datagram &) { return ++n % 7 == 0; };  // one datagram in seven lost
    std::vector<std::unique_ptr<Message>> msgs;
    for (std::uint32_t s = 0; s < 32; ++s)
        for (std::uint32_t r = 0; r < 32; ++r) {
            if (s / 4 == r / 4) continue;
            msgs.push_back(std::make_unique<Message>());
            send(net[s], r, *msgs.back());
        }
    net.run();
    for (std::uint32_t s = 0; s < 32; ++s) {
        EXPECT_EQ(net[s].cm().live_ini_qps(), 7u) << s;
        EXPECT_EQ(net[s].failures.size(), 0u) << s;
    }
    EXPECT_EQ(net.live_tgts(), 32u * 7);
    std::size_t posted = 0;
    for (const auto &[key, qp] : net.qps)
        if (qp->kind == FakeQp::Kind::ini) posted += qp->posted.size();
    EXPECT_EQ(posted, msgs.size());  // every send went out exactly once, none dropped while connecting
}

// The port went down: nothing new is posted on a connected link, sends queue in order and nobody hears of an
// error; when it is back they go out in order.
TEST(ConnectionManager, AHeldPortQueuesSendsWithoutErrorAndResumesInOrder) {
    Net net(2, 1);
    Message a;
    send(net[0], 1, a);
    net.run();
    NodeLink &link = *net[0].peer(1).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    FakeQp *ini = ini_of(link);
    ASSERT_EQ(ini->posted.size(), 1u);
    net[0].cm().hold();
    EXPECT_TRUE(net[0].cm().held());
    Message b, c;
    send(net[0], 1, b);
    send(net[0], 1, c);
    EXPECT_EQ(ini->posted.size(), 1u);  // held
    EXPECT_FALSE(b.done || c.done);
    EXPECT_TRUE(link.queue().has_pending());
    EXPECT_FALSE(link.queue().can_post());  // sendi and the eager ring path step aside too
    net.run(10000000);
    EXPECT_EQ(link.state(), NodeLink::State::connected);
    net[0].cm().resume();
    ASSERT_EQ(ini->posted.size(), 3u);
    EXPECT_EQ(ini->posted[1].sg_list->addr, reinterpret_cast<std::uintptr_t>(b.data));
    EXPECT_EQ(ini->posted[2].sg_list->addr, reinterpret_cast<std::uintptr_t>(c.data));
    complete_all(link);
    EXPECT_TRUE(a.done && b.done && c.done);
    EXPECT_EQ(b.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(net[0].failures.empty());
}

// A rail given up for good (another rail takes its traffic): what was posted and what was queued completes with
// the status at once, in order, and later sends are refused (the BTL forwards them); resume() reopens nothing.
TEST(ConnectionManager, AnAbandonedRailFailsWhatWasPostedAndQueuedAndRefusesMore) {
    Net net(2, 1);
    Message a;
    send(net[0], 1, a);
    net.run();
    NodeLink &link = *net[0].peer(1).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    net[0].cm().hold();
    Message b;
    send(net[0], 1, b);
    EXPECT_FALSE(a.done || b.done);
    net[0].cm().abandon(IBV_WC_WR_FLUSH_ERR);
    EXPECT_TRUE(a.done && b.done);
    EXPECT_EQ(a.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(b.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_TRUE(link.queue().broken());
    EXPECT_FALSE(link.queue().has_pending());
    EXPECT_EQ(link.queue().outstanding_callbacks(), 0u);
    net[0].cm().resume();
    EXPECT_FALSE(link.queue().is_open());
    Message c;
    EXPECT_NE(net[0].peer(1).queue->post_or_queue(c.op), 0);
    EXPECT_FALSE(c.done);
}

// A connection started while the port is down (its datagrams are lost) does not give up, however long the hold,
// and completes once the port is back; its queued sends go out only then.
TEST(ConnectionManager, AConnectionMadeDuringAHoldWaitsAndCompletesAfterIt) {
    CmConfig cfg;
    cfg.connect_timeout_us = 2000000;
    Net net(2, 1, cfg);
    bool down = true;
    net.lose = [&](const Datagram &d) { return down && d.from == 0; };
    net[0].cm().hold();
    Message a;
    send(net[0], 1, a);
    NodeLink &link = *net[0].peer(1).link;
    net.run(3 * cfg.connect_timeout_us);  // longer than the connect timeout
    EXPECT_EQ(link.state(), NodeLink::State::connecting);
    EXPECT_TRUE(net[0].failures.empty());
    EXPECT_FALSE(a.done);
    down = false;
    net[0].cm().resume();
    net.run();
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    ASSERT_NE(ini_of(link), nullptr);
    EXPECT_EQ(ini_of(link)->posted.size(), 1u);
    complete_all(link);
    EXPECT_TRUE(a.done);
    EXPECT_EQ(a.status, IBV_WC_SUCCESS);
}

// An ACCEPT that arrives while the port is held readies the QP but posts nothing until the port is back.
TEST(ConnectionManager, AnAcceptDuringAHoldPostsNothingUntilResume) {
    Net net(2, 1);
    Message a;
    send(net[0], 1, a);
    net[0].cm().hold();
    net.run(1000000);
    NodeLink &link = *net[0].peer(1).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    ASSERT_NE(link.ini_qpn(), 0u);
    EXPECT_EQ(link.queue().qp(), nullptr);  // not opened
    net[0].cm().resume();
    ASSERT_NE(ini_of(link), nullptr);
    EXPECT_EQ(ini_of(link)->posted.size(), 1u);
}

// Every QP a manager holds maps to its connection and peer: the INI QP to its node and owner, the TGT QP to its
// sender, a handle to the sender's INI QP; anything else is unknown.
TEST(ConnectionManager, EveryQpMapsToItsConnectionAndPeer) {
    Net net(2, 2);
    Message a, b;
    send(net[0], 3, a);  // rank 3 owns the TGT QP
    send(net[0], 2, b);
    net.run();
    NodeLink &link = *net[0].peer(3).link;
    const QpRole ini = net[0].cm().role_of(link.ini_qpn());
    EXPECT_EQ(ini.kind, QpRole::Kind::ini);
    EXPECT_EQ(ini.node, 1u);
    EXPECT_EQ(ini.rank, 3u);
    EXPECT_EQ(ini.peer_qpn, link.tgt_qpn());
    EXPECT_FALSE(ini.closing);
    const QpRole tgt = net[3].cm().role_of(link.tgt_qpn());
    EXPECT_EQ(tgt.kind, QpRole::Kind::tgt_owned);
    EXPECT_EQ(tgt.rank, 0u);
    EXPECT_EQ(tgt.node, 0u);
    EXPECT_EQ(tgt.peer_qpn, link.ini_qpn());
    EXPECT_EQ(tgt.generation, link.generation());
    net[2].cm().hold_tgt(link.tgt_qpn(), link.ini_qpn());
    const QpRole handle = net[2].cm().role_of(link.tgt_qpn());
    EXPECT_EQ(handle.kind, QpRole::Kind::tgt_handle);
    EXPECT_EQ(handle.peer_qpn, link.ini_qpn());
    EXPECT_EQ(net[1].cm().role_of(link.tgt_qpn()).kind, QpRole::Kind::unknown);
    EXPECT_EQ(net[0].cm().role_of(0).kind, QpRole::Kind::unknown);
    EXPECT_EQ(net[0].cm().link_of(link.queue()), &link);
}

// The drain fence of an eviction is the manager's own operation, never an upper layer's fragment.
TEST(ConnectionManager, TheDrainFenceIsKnownAsTheManagersOwnOperation) {
    Net net(3, 2, capped_at_one());
    Message a, b, d;
    const SendOp *fence = nullptr;
    send(net[0], 2, a);
    net.run();
    complete_all(*net[0].peer(2).link);
    // A send nobody waits for (inline): unsignaled, so closing the link needs a fence to retire it.
    Peer &p2 = net[0].peer(2);
    p2.prepare_srq(b.op, b.data, sizeof(b.data), 0, make_imm(0x41));
    b.op.on_complete = nullptr;
    ASSERT_EQ(p2.queue->post_or_queue(b.op), 0);
    net[0].peer(2).link->queue().clear_used();
    NodeLink &link = *net[0].peer(2).link;
    send(net[0], 4, d);  // under the cap: evicts node 1's link, whose unsignaled send needs a fence
    net.run(100000);
    ASSERT_EQ(link.state(), NodeLink::State::draining);
    ASSERT_GE(ini_of(link)->posted.size(), 3u);
    // The last request posted on the draining link is the fence: find its op through the queue's slot.
    ibv_wc wc{};
    wc.wr_id = ini_of(link)->posted.back().wr_id;
    wc.status = IBV_WC_RETRY_EXC_ERR;
    fence = link.queue().failed_op(wc);
    ASSERT_NE(fence, nullptr);
    EXPECT_TRUE(net[0].cm().is_fence(fence));
    EXPECT_FALSE(net[0].cm().is_fence(&a.op));
    EXPECT_EQ(net[0].cm().role_of(link.ini_qpn()).closing, true);
}

// Two remote nodes whose launcher node ids are equal (a hostname hash collision, or a launcher that hands every
// rank the caller's node id) still get a link each: links are keyed by the port's identity, and each message goes
// to its own node's INI QP naming its own receiver's SRQ.
TEST(ConnectionManager, NodesWithTheSameLauncherIdStillGetTheirOwnLinks) {
    Net net(3, 1);
    for (std::uint32_t r = 0; r < 3; ++r) net[r].relabel(0x80001234u);
    Message a, b;
    send(net[0], 1, a);
    send(net[0], 2, b);
    net.run();
    NodeLink &l1 = *net[0].peer(1).link;
    NodeLink &l2 = *net[0].peer(2).link;
    ASSERT_NE(&l1, &l2);
    ASSERT_EQ(l1.state(), NodeLink::State::connected);
    ASSERT_EQ(l2.state(), NodeLink::State::connected);
    ASSERT_EQ(ini_of(l1)->posted.size(), 1u);
    ASSERT_EQ(ini_of(l2)->posted.size(), 1u);
    EXPECT_EQ(ini_of(l1)->posted[0].qp_type.xrc.remote_srqn, net[1].address().srqs.front().srq_num);
    EXPECT_EQ(ini_of(l2)->posted[0].qp_type.xrc.remote_srqn, net[2].address().srqs.front().srq_num);
    EXPECT_EQ(net.qps[l1.tgt_qpn()]->owner_rank, 1u);  // each INI QP reaches a TGT QP on its own node
    EXPECT_EQ(net.qps[l2.tgt_qpn()]->owner_rank, 2u);
    EXPECT_TRUE(net[0].failures.empty());
}

// Rank 2 (node 1) carries the same launcher id as rank 1 (node 0's other node), as two hosts whose names hash
// alike would: a link to node 0 whose owner was taken from that id (rank 2) would make its TGT QP in node 1's
// domain and deliver rank 1's messages to whoever holds that SRQ number there. The manager refuses such an owner
// (the link fails with why) and nothing is made on either node.
TEST(ConnectionManager, AnOwnerOnAnotherPortIsRefusedNotConnected) {
    Net net(3, 1);
    for (std::uint32_t r = 1; r < 3; ++r) net[r].relabel(0x936d3391u);
    NodeLink &link = net[0].cm().link_for(net[1].address(), 2);
    Message a;
    send(net[0], 1, a);  // rank 1 joins the link to its node's port, owner and all
    ASSERT_EQ(net[0].peer(1).link, &link);
    net.run();
    EXPECT_EQ(link.state(), NodeLink::State::failed);
    ASSERT_EQ(net[0].failures.size(), 1u);
    EXPECT_NE(net[0].failures[0].find("rank 2 is not on the HCA port"), std::string::npos) << net[0].failures[0];
    EXPECT_TRUE(a.done);
    EXPECT_NE(a.status, IBV_WC_SUCCESS);
    EXPECT_EQ(net[2].cm().owned_tgts(), 0u);
    EXPECT_EQ(net.live_tgts(), 0u);
    EXPECT_EQ(net.live_of(FakeQp::Kind::ini), 0u);
}

namespace {
CmMessage decoded(const Datagram &d) {
    const auto m = decode_cm(d.bytes);
    return m ? *m : CmMessage{};
}
}  // namespace

// An initiator that gives up (no ACCEPT in time) after the target made its TGT QP tells the target to close it:
// nothing is left behind on the target.
TEST(ConnectionManager, GivingUpClosesTheTgtQpTheTargetMade) {
    CmConfig cfg;
    cfg.connect_timeout_us = 2000000;
    Net net(2, 1, cfg);
    bool lossy = true;
    net.lose = [&](const Datagram &d) { return lossy && decoded(d).type == CmType::Accept; };
    Message a;
    send(net[0], 1, a);
    net.run(cfg.connect_timeout_us + 100000);
    EXPECT_EQ(net[0].peer(1).link->state(), NodeLink::State::failed);
    lossy = false;
    net.run();
    EXPECT_EQ(net[1].cm().owned_tgts(), 0u);
    EXPECT_EQ(net.live_tgts(), 0u);
    EXPECT_EQ(net.live_of(FakeQp::Kind::ini), 0u);
}

// An ACCEPT that arrives after the initiator gave up (and whose first CLOSE was lost) is answered with a CLOSE.
TEST(ConnectionManager, ALateAcceptIsAnsweredWithAClose) {
    CmConfig cfg;
    cfg.connect_timeout_us = 2000000;
    cfg.reciprocate = false;
    Net net(2, 1, cfg);
    net.lose = [&](const Datagram &d) {
        const CmMessage m = decoded(d);
        return m.type == CmType::Close && m.tgt_qpn == 0;  // the give-up's CLOSE never arrives
    };
    net.delay_us = 3000000;  // every datagram arrives after the initiator gave up
    NodeLink &link = net[0].cm().link_for(net[1].address(), 1);
    net[0].cm().connect(link);  // eager: nothing queued, given up quietly
    net.run();
    EXPECT_EQ(link.state(), NodeLink::State::idle);
    EXPECT_GE(net[0].cm().counters().cm_stale, 1u);
    EXPECT_EQ(net[1].cm().owned_tgts(), 0u);
    EXPECT_EQ(net.live_tgts(), 0u);
}

// A TGT QP whose CLOSE never arrived is destroyed when its sender connects again with a newer generation: at most
// one per sender.
TEST(ConnectionManager, ANewGenerationDestroysTheSendersStaleTgtQp) {
    Net net(3, 2, capped_at_one());
    net.lose = [](const Datagram &d) { return decoded(d).type == CmType::Close; };
    Message a, b, d, e;
    NodeLink &link = connect_then_evict(net, a, b, d);  // node 1's connection evicted, its CLOSEs lost
    EXPECT_EQ(link.state(), NodeLink::State::idle);
    EXPECT_EQ(net[2].cm().owned_tgts(), 1u);  // stale, still held
    send(net[0], 2, e);                       // node 1 again: evicts node 2's, reconnects with a newer generation
    net.run();
    complete_all(*net[0].peer(4).link);  // node 2's connection drains
    net.run();
    ASSERT_EQ(net[0].peer(2).link->state(), NodeLink::State::connected);
    ASSERT_NE(net[0].peer(2).link->state(), NodeLink::State::failed);
    EXPECT_EQ(net[2].cm().owned_tgts(), 1u);  // the new one only
    net.lose = [](const Datagram &) { return false; };
    (void)b;
}
