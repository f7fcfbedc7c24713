// SPDX-License-Identifier: BSD-3-Clause
// A TGT QP outlives its creator (CmConfig::node_mate_holds): before ACCEPT a node-mate of the creator opens a
// handle of its own (HOLD, HELD), so that the creator's death, even before any message reached its node-mates,
// leaves the connection working for them; the holder's handle goes with the initiator's CLOSE or death.
#include "cm_test_net.h"

#include <gtest/gtest.h>

using namespace xrc;
using namespace xrc::cm_test;

namespace {

CmConfig holding() {
    CmConfig c;
    c.requeue_refused = true;
    c.reciprocate = false;
    c.node_mate_holds = true;
    return c;
}

}  // namespace

// Rank 2 makes the TGT QP of rank 0's connection and dies before anything reached rank 3: rank 3 holds the QP, so
// rank 0's sends to rank 3 go on over the same connection, and its CLOSE at finalize releases rank 3's handle.
TEST(ConnectionManagerHolder, ATgtQpOutlivesACreatorThatDiesBeforeAnyMessageToItsNodeMates) {
    Net net(2, 2, holding());  // ranks 0, 1 on node 0; 2, 3 on node 1
    Message a;
    send(net[0], 2, a);
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(link.owner(), 2u);
    EXPECT_EQ(link.holder(), 3u);
    EXPECT_EQ(net.tgt_users[link.tgt_qpn()], 2) << "the creator's QP and the holder's handle";
    complete_all(link);
    EXPECT_TRUE(a.done);
    const std::uint32_t ini_qpn = link.ini_qpn();

    net.kill(2);
    EXPECT_EQ(net.live_tgts(), 1u) << "the holder keeps the TGT QP";
    net[0].cm().peer_died(2);
    EXPECT_EQ(link.owner(), 3u) << "the holder is the link's rank from now on";
    Message b;
    send(net[0], 3, b);
    EXPECT_EQ(link.ini_qpn(), ini_qpn) << "the same connection";
    ASSERT_EQ(ini_of(link)->posted.back().qp_type.xrc.remote_srqn, net[3].address().srqs.front().srq_num);
    complete_all(link);
    EXPECT_TRUE(b.done);
    EXPECT_EQ(b.status, IBV_WC_SUCCESS);

    net[0].cm().begin_finalize();
    net.run(20000);
    complete_all(link);
    net.run(1000000);
    EXPECT_TRUE(net[0].cm().finished()) << "no CLOSE waits for the dead creator";
    EXPECT_EQ(net.live_tgts(), 0u) << "the CLOSE reached the holder";
    EXPECT_TRUE(net[0].failures.empty());
}

// Without holding (a job where a death ends it anyway), the creator's death takes the QP away.
TEST(ConnectionManagerHolder, WithoutHoldingTheQpDiesWithItsCreator) {
    CmConfig c = holding();
    c.node_mate_holds = false;
    Net net(2, 2, c);
    Message a;
    send(net[0], 2, a);
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    EXPECT_EQ(link.holder(), kCmNoRank);
    net.kill(2);
    EXPECT_EQ(net.live_tgts(), 0u);
}

// HOLD and HELD are datagrams: lost ones are sent again, and the initiator's CONNECT is not answered before the
// holder holds the QP (a retransmitted CONNECT meanwhile changes nothing).
TEST(ConnectionManagerHolder, LostHoldsAreSentAgainAndAcceptWaitsForTheHolder) {
    Net net(2, 2, holding());
    int holds_lost = 0;
    net.lose = [&](const Datagram &d) {
        const auto m = decode_cm(d.bytes);
        if (m && m->type == CmType::Hold && holds_lost < 3) return ++holds_lost, true;
        if (m && m->type == CmType::Held && holds_lost < 4) return ++holds_lost, true;
        return false;
    };
    Message a;
    send(net[0], 2, a);
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(holds_lost, 4);
    EXPECT_EQ(link.holder(), 3u);
    EXPECT_EQ(net.tgt_users[link.tgt_qpn()], 2);
    EXPECT_EQ(net[2].cm().owned_tgts(), 1u);
}

// A holder that never answers (alive but not serving its datagrams) delays the connection by hold_wait_us at most:
// then the creator accepts without a holder.
TEST(ConnectionManagerHolder, AHolderThatDoesNotAnswerCostsAtMostTheHoldWait) {
    CmConfig c = holding();
    c.hold_wait_us = 300000;
    Net net(2, 2, c);
    net.lose = [](const Datagram &d) { return d.to == 3; };
    Message a;
    send(net[0], 2, a);
    const std::uint64_t start = net.clock;
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(link.holder(), kCmNoRank);
    EXPECT_GE(net.clock - start, c.hold_wait_us);
    EXPECT_LT(net.clock - start, c.hold_wait_us + c.max_retry_us);
}

// The chosen holder dies before it answered: another node-mate is asked; with none left, ACCEPT goes without one.
TEST(ConnectionManagerHolder, AHolderThatDiesIsReplaced) {
    Net net(2, 3, holding());                                // ranks 3, 4, 5 on node 1
    net.lose = [](const Datagram &d) { return d.to == 4; };  // rank 0's holder would be 4 (ranks from 0 % 2)
    Message a;
    send(net[0], 3, a);
    net.run(5000);
    net.kill(4);
    net[3].cm().peer_died(4);
    net.run();
    NodeLink &link = *net[0].peer(3).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(link.holder(), 5u);
    EXPECT_EQ(net.tgt_users[link.tgt_qpn()], 2);
}

// The initiator dies: its TGT QP goes on the creator (as before) and the holder's handle with it.
TEST(ConnectionManagerHolder, TheInitiatorsDeathReleasesTheHoldersHandle) {
    Net net(2, 2, holding());
    Message a;
    send(net[0], 2, a);
    net.run();
    ASSERT_EQ(net.live_tgts(), 1u);
    net.kill(0);
    net[2].cm().peer_died(0);
    EXPECT_EQ(net.live_tgts(), 1u) << "the holder's handle";
    net[3].cm().peer_died(0);
    EXPECT_EQ(net.live_tgts(), 0u);
}

// Rank 5 received through rank 0's TGT QP (its handle opened on the first message, not knowing whose the QP is):
// when rank 0 dies, its creator, rank 3, tells its node-mates, so that handle goes too, not at rank 5's finalize.
TEST(ConnectionManagerHolder, TheInitiatorsDeathReleasesTheHandlesOpenedOnFirstMessages) {
    Net net(2, 3, holding());  // ranks 0, 1, 2 on node 0; 3, 4, 5 on node 1
    Message a;
    send(net[0], 3, a);
    net.run();
    const NodeLink &link = *net[0].peer(3).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    ASSERT_EQ(link.owner(), 3u);
    ASSERT_EQ(link.holder(), 4u);
    net[5].cm().hold_tgt(link.tgt_qpn(), link.ini_qpn());  // rank 5's first message arrived
    ASSERT_EQ(net.tgt_users[link.tgt_qpn()], 3) << "creator, holder and rank 5";
    ASSERT_EQ(net[5].cm().held_handles(), 1u);
    net.kill(0);
    for (std::uint32_t r : {3u, 4u, 5u}) net[r].cm().peer_died(0);
    net.run();
    EXPECT_EQ(net[5].cm().held_handles(), 0u) << "the creator's RELEASE";
    EXPECT_EQ(net.live_tgts(), 0u) << "nothing of the dead initiator is left in node 1's HCA";
}

// A RELEASE from another node, or naming another initiator's QP, lets go of nothing.
TEST(ConnectionManagerHolder, AReleaseFromAnotherNodeOrForAnotherQpReleasesNothing) {
    Net net(2, 3, holding());
    Message a;
    send(net[0], 3, a);
    net.run();
    const NodeLink &link = *net[0].peer(3).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    net[5].cm().hold_tgt(link.tgt_qpn(), link.ini_qpn());
    ASSERT_EQ(net[5].cm().held_handles(), 1u);
    const auto release = [&](std::uint32_t from, std::uint32_t ini_qpn) {
        CmMessage m;
        m.type = CmType::Release;
        m.jobid = 7;
        m.src_rank = from;
        m.dst_rank = 5;
        m.token = net[5].address().token;
        m.generation = link.generation();
        m.ini_qpn = ini_qpn;
        m.tgt_qpn = link.tgt_qpn();
        m.named_rank = 0;
        net.wire.push_back({from, 5, encode_cm(m), net.clock});
        net.run();
    };
    const std::uint64_t rejected = net[5].cm().counters().cm_rejected;
    release(1, link.ini_qpn());      // rank 1 is on node 0: not this node's TGT QP to speak of
    release(3, link.ini_qpn() + 1);  // not the INI QP rank 5 holds it toward
    EXPECT_EQ(net[5].cm().counters().cm_rejected, rejected + 1);
    EXPECT_EQ(net[5].cm().held_handles(), 1u);
    release(3, link.ini_qpn());
    EXPECT_EQ(net[5].cm().held_handles(), 0u);
}

// Only a rank of the creator's own node may ask for a hold; a HOLD from elsewhere opens nothing.
TEST(ConnectionManagerHolder, AHoldFromAnotherNodeOpensNothing) {
    Net net(2, 2, holding());
    Message a;
    send(net[0], 2, a);
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    const int users = net.tgt_users[link.tgt_qpn()];
    CmMessage h;
    h.type = CmType::Hold;
    h.jobid = 7;
    h.src_rank = 1;  // node 0
    h.dst_rank = 3;
    h.token = net[3].address().token;
    h.generation = link.generation();
    h.ini_qpn = link.ini_qpn();
    h.tgt_qpn = link.tgt_qpn();
    h.named_rank = 0;
    net.wire.push_back({1, 3, encode_cm(h), net.clock});
    const std::uint64_t rejected = net[3].cm().counters().cm_rejected;
    net.run();
    EXPECT_EQ(net[3].cm().counters().cm_rejected, rejected + 1);
    EXPECT_EQ(net.tgt_users[link.tgt_qpn()], users);
}

// The creator and its holder die at once, before any other rank of their node had a message on the connection: the
// TGT QP went with its last handle, so what rank 0 posted there (all for the two dead) completes with an error at
// once instead of timing out, and a send to the node's live rank goes over a new connection, made through it.
TEST(ConnectionManagerHolder, ACreatorAndItsHolderDyingAtOnceLeaveNoConnectionToTheLiving) {
    Net net(2, 3, holding());  // ranks 0, 1, 2 on node 0; 3, 4, 5 on node 1
    Message a, b;
    send(net[0], 3, a);
    net.run();
    NodeLink &link = *net[0].peer(3).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    const std::uint32_t holder = link.holder(), other = holder == 4 ? 5 : 4;
    ASSERT_NE(holder, kCmNoRank);
    send(net[0], holder, b);  // posted, never acknowledged: the node's HCA drops what reaches no QP
    ASSERT_FALSE(b.done);
    const std::uint32_t old_ini = link.ini_qpn(), old_tgt = link.tgt_qpn();

    net.kill(3);
    net.kill(holder);
    EXPECT_EQ(net.tgt_users[old_tgt], 0) << "the TGT QP went with its last handle";
    for (std::uint32_t survivor : {0u, other}) {
        net[survivor].cm().peer_died(3);
        net[survivor].cm().peer_died(holder);
    }
    Message c;
    send(net[0], other, c);  // queued: the link makes a new connection first
    net.run();
    EXPECT_TRUE(b.done);
    EXPECT_EQ(b.status, IBV_WC_REM_ABORT_ERR) << "completed once, with an error, not after the retry budget";
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(link.owner(), other);
    EXPECT_NE(link.ini_qpn(), old_ini) << "a new connection";
    EXPECT_EQ(net[other].cm().owned_tgts(), 1u);
    ASSERT_FALSE(ini_of(link)->posted.empty());
    EXPECT_EQ(ini_of(link)->posted.back().qp_type.xrc.remote_srqn, net[other].address().srqs.front().srq_num);
    EXPECT_NE(ntohl(ini_of(link)->posted.back().imm_data) & kImmFirst, 0u) << "the first of the new connection";
    complete_all(link);
    EXPECT_TRUE(c.done);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(net[0].failures.empty());
}

// The holder alone dies after ACCEPT while the creator lives: nothing changes for the initiator (the creator's QP
// carries on), and no new connection is made.
TEST(ConnectionManagerHolder, AHolderDyingAloneAfterAcceptChangesNothingForTheInitiator) {
    Net net(2, 3, holding());
    Message a, c;
    send(net[0], 3, a);
    net.run();
    NodeLink &link = *net[0].peer(3).link;
    complete_all(link);
    const std::uint32_t holder = link.holder(), other = holder == 4 ? 5 : 4, ini = link.ini_qpn();
    net.kill(holder);
    net[0].cm().peer_died(holder);
    send(net[0], other, c);
    net.run();
    EXPECT_EQ(link.ini_qpn(), ini);
    EXPECT_EQ(link.owner(), 3u);
    complete_all(link);
    EXPECT_TRUE(c.done);
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
}
