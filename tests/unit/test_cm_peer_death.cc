// SPDX-License-Identifier: BSD-3-Clause
// A process of the job dies (User-Level Failure Mitigation): the connection manager drops what was queued for it,
// connects to its node through a live rank from then on, releases the TGT QPs it had as a sender, and a request
// its node refused (its SRQ gone with it) costs only that request: the link connects again, through a live rank,
// for what followed it.
#include "cm_test_net.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace xrc;
using namespace xrc::cm_test;

namespace {

CmConfig requeueing() {
    CmConfig c;
    c.requeue_refused = true;
    c.reciprocate = false;
    return c;
}

}  // namespace

TEST(ConnectionManagerPeerDeath, ADeadRanksQueuedSendsAreDroppedAndItsNodeIsReachedThroughALiveRank) {
    Net net(2, 2, requeueing());  // ranks 0, 1 on node 0; 2, 3 on node 1
    Message a, b;
    send(net[0], 2, a);  // rank 2 is the first wanted: the link would go through it
    send(net[0], 3, b);
    NodeLink &link = *net[0].peer(2).link;
    net[0].cm().peer_died(2);
    EXPECT_TRUE(net[0].cm().is_dead(2));
    net.run();
    EXPECT_TRUE(a.done);
    EXPECT_EQ(a.status, IBV_WC_REM_ABORT_ERR);
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(link.owner(), 3u);
    EXPECT_EQ(net[3].cm().owned_tgts(), 1u);
    EXPECT_EQ(net[2].cm().owned_tgts(), 0u);
    ASSERT_EQ(ini_of(link)->posted.size(), 1u);
    EXPECT_EQ(ini_of(link)->posted[0].qp_type.xrc.remote_srqn, net[3].address().srqs.front().srq_num);
    EXPECT_TRUE(net[0].failures.empty());
}

TEST(ConnectionManagerPeerDeath, TheTgtQpsADeadSenderHadGoAndItsLateConnectMakesNothing) {
    Net net(2, 2, requeueing());
    Message a;
    send(net[0], 2, a);
    net.run();
    complete_all(*net[0].peer(2).link);
    ASSERT_EQ(net[2].cm().owned_tgts(), 1u);
    net[2].cm().peer_died(0);
    EXPECT_EQ(net[2].cm().owned_tgts(), 0u);
    EXPECT_EQ(net.live_tgts(), 0u);
}

// Rank 2 made the TGT QP of rank 0's link to node 1 and dies with sends to it and to rank 3 in flight: its node
// refuses the first one to it; the older sends were executed, the refused one fails, and the newer ones to rank 3
// go out again, once, over a new connection through rank 3 (those to rank 2 are dropped).
TEST(ConnectionManagerPeerDeath, ARefusalReconnectsThroughALiveRankAndSendsWhatFollowedItOnce) {
    Net net(2, 2, requeueing());
    Message x;
    send(net[0], 2, x);
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    complete_all(link);
    FakeQp *first = ini_of(link);
    const std::uint32_t first_qpn = first->qp.qp_num;
    const std::uint32_t generation = link.generation();
    Message older, refused, later3, later2;
    send(net[0], 3, older);
    send(net[0], 2, refused);
    send(net[0], 3, later3);
    send(net[0], 2, later2);
    ASSERT_EQ(first->posted.size(), 5u);
    net[0].cm().peer_died(2);  // the BTL learns it from the refusal's report, before the queue takes it
    ibv_wc wc{};
    wc.wr_id = first->posted[2].wr_id;
    wc.qp_num = first_qpn;
    wc.status = IBV_WC_REM_INV_REQ_ERR;
    ASSERT_TRUE(link.queue().would_requeue(wc));
    EXPECT_EQ(link.queue().on_completion(wc), IBV_WC_REM_INV_REQ_ERR);
    EXPECT_FALSE(link.queue().broken());
    net[0].cm().reconnect(link.queue());
    EXPECT_TRUE(older.done);
    EXPECT_EQ(older.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(refused.done);
    EXPECT_EQ(refused.status, IBV_WC_REM_INV_REQ_ERR);
    net.run();
    EXPECT_TRUE(later2.done);
    EXPECT_EQ(later2.status, IBV_WC_REM_ABORT_ERR);
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_GT(link.generation(), generation);
    EXPECT_EQ(link.owner(), 3u);
    FakeQp *second = ini_of(link);
    ASSERT_NE(second->qp.qp_num, first_qpn);
    ASSERT_EQ(second->posted.size(), 1u);  // later3, once
    EXPECT_EQ(second->posted[0].qp_type.xrc.remote_srqn, net[3].address().srqs.front().srq_num);
    EXPECT_FALSE(later3.done);
    complete_all(link);
    EXPECT_TRUE(later3.done);
    EXPECT_EQ(later3.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(net[0].failures.empty());
    EXPECT_EQ(net[3].cm().owned_tgts(), 1u);
}

// The same with inline sends nobody owns (sendi's under ULFM): the link's queue kept a copy of each, so the refusal
// of one to the dead rank still costs only that one; the newer one to rank 3 goes out again, once, from its copy,
// and the newer one to rank 2 is dropped.
TEST(ConnectionManagerPeerDeath, ARefusalSendsAgainTheInlineSendsTheLinkKeptCopiesOf) {
    CmConfig config = requeueing();
    config.kept_copy_bytes = 64;
    Net net(2, 2, config);
    Message x;
    send(net[0], 2, x);
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    complete_all(link);
    ASSERT_GE(link.queue().kept_bytes(), 64u);
    FakeQp *first = ini_of(link);
    const std::uint32_t first_qpn = first->qp.qp_num;
    // As sendi does: assembled and prepared in the copy the next post takes, posted inline without a callback.
    const auto send_inline = [&](std::uint32_t to, unsigned char byte) {
        Peer &p = net[0].peer(to);
        ASSERT_TRUE(p.queue->keeps_copies());
        KeptSend *kept = &p.queue->next_kept();
        std::memset(kept->data, byte, 8);
        p.prepare_srq(kept->op, kept->data, 8, 0, make_imm(0x41));
        kept->op.wr.send_flags = IBV_SEND_INLINE;
        ASSERT_EQ(p.queue->post_kept(*kept), 0);
    };
    send_inline(3, 'o');  // older
    send_inline(2, 'r');  // refused
    send_inline(3, 'l');  // later, to a live rank
    send_inline(2, 'd');  // later, to the dead one
    ASSERT_EQ(first->posted.size(), 5u);
    net[0].cm().peer_died(2);
    ibv_wc wc{};
    wc.wr_id = first->posted[2].wr_id;
    wc.qp_num = first_qpn;
    wc.status = IBV_WC_REM_INV_REQ_ERR;
    ASSERT_NE(link.queue().failed_copy(wc), nullptr);
    EXPECT_EQ(link.queue().failed_copy(wc)->wr.qp_type.xrc.remote_srqn, net[2].address().srqs.front().srq_num);
    ASSERT_TRUE(link.queue().would_requeue(wc));
    EXPECT_EQ(link.queue().on_completion(wc), IBV_WC_REM_INV_REQ_ERR);
    net[0].cm().reconnect(link.queue());
    net.run();
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(link.owner(), 3u);
    FakeQp *second = ini_of(link);
    ASSERT_NE(second->qp.qp_num, first_qpn);
    ASSERT_EQ(second->posted.size(), 1u);  // the later one to rank 3, once
    EXPECT_EQ(second->posted[0].qp_type.xrc.remote_srqn, net[3].address().srqs.front().srq_num);
    EXPECT_TRUE(second->posted[0].send_flags & IBV_SEND_INLINE);
    EXPECT_EQ(second->posted[0].sg_list->length, 8u);
    EXPECT_EQ(reinterpret_cast<const unsigned char *>(second->posted[0].sg_list->addr)[0], 'l');
    complete_all(link);
    EXPECT_TRUE(net[0].failures.empty());
}

namespace {

// An inline send nobody owns, as sendi makes it under ULFM: prepared in the copy the queue's next post takes.
void send_kept(Process &from, std::uint32_t to) {
    Peer &p = from.peer(to);
    ASSERT_TRUE(p.queue->keeps_copies());
    KeptSend &kept = p.queue->next_kept();
    std::memset(kept.data, 0x5a, 8);
    p.prepare_srq(kept.op, kept.data, 8, 0, make_imm(0x41));
    kept.op.wr.send_flags = IBV_SEND_INLINE;
    ASSERT_EQ(p.queue->post_kept(kept), 0);
}

}  // namespace

// The creator of the link's TGT QP dies while unsignaled inline sends are outstanding on it. Its node-mates that
// hold a handle on the TGT QP may leave at any time without a word (only a creator says LEAVING), so the link does
// not wait for its close to retire them: a fence goes at once toward the live rank it now goes through (rank 3 was
// sent a first message on this connection: it holds a handle), and every later send is signaled, so that the close
// needs no fence.
TEST(ConnectionManagerPeerDeath, ACreatorsDeathRetiresTheUnsignaledSendsAtOnce) {
    CmConfig config = requeueing();
    config.kept_copy_bytes = 64;
    Net net(2, 2, config);
    Message x;
    send(net[0], 2, x);
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    complete_all(link);
    ASSERT_EQ(link.owner(), 2u);
    send_kept(net[0], 3);
    send_kept(net[0], 2);
    FakeQp *ini = ini_of(link);
    ASSERT_EQ(ini->posted.size(), 3u);
    ASSERT_FALSE(ini->posted[2].send_flags & IBV_SEND_SIGNALED);
    ASSERT_TRUE(link.queue().needs_fence());
    net[0].cm().peer_died(2);
    EXPECT_EQ(link.owner(), 3u);
    ASSERT_EQ(ini->posted.size(), 4u);  // the fence, signaled, toward rank 3's SRQ
    EXPECT_TRUE(ini->posted[3].send_flags & IBV_SEND_SIGNALED);
    EXPECT_EQ(ini->posted[3].qp_type.xrc.remote_srqn, net[3].address().srqs.front().srq_num);
    EXPECT_FALSE(link.queue().needs_fence());
    send_kept(net[0], 3);
    EXPECT_TRUE(ini->posted.back().send_flags & IBV_SEND_SIGNALED);  // from now on
    complete_all(link);
    EXPECT_TRUE(link.queue().idle());
    EXPECT_TRUE(net[0].failures.empty());
}

// The same when no live rank of the node was sent anything on that connection: nobody may hold a handle, the TGT QP
// may be gone with its creator, and what is outstanding went to the dead: it is forgotten, not fenced.
TEST(ConnectionManagerPeerDeath, ACreatorsDeathForgetsWhatOnlyTheDeadWereSent) {
    CmConfig config = requeueing();
    config.kept_copy_bytes = 64;
    Net net(2, 2, config);
    Message x;
    send(net[0], 2, x);
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    complete_all(link);
    send_kept(net[0], 2);
    send_kept(net[0], 2);
    FakeQp *ini = ini_of(link);
    ASSERT_EQ(ini->posted.size(), 3u);
    ASSERT_TRUE(link.queue().needs_fence());
    net[0].peer(3);  // rank 3 is the link's peer, but was sent nothing on it
    net[0].cm().peer_died(2);
    EXPECT_EQ(link.owner(), 3u);
    EXPECT_EQ(ini->posted.size(), 3u);  // no fence
    // Nobody alive holds the TGT QP: it went with its creator, and the connection with it (a request to rank 3
    // through it would go unanswered for the retry budget); the next send to rank 3 makes a new one.
    net.run();
    EXPECT_TRUE(link.queue().idle());
    EXPECT_EQ(link.state(), NodeLink::State::idle);
    EXPECT_EQ(net.live_of(FakeQp::Kind::ini), 0u);
    EXPECT_TRUE(net[0].failures.empty());
}

// SRQ numbers are each node's HCA's own: a rank on another node may have the dead rank's numbers, and what is queued
// for it stays (only the dead rank's own node's link drops what names them).
TEST(ConnectionManagerPeerDeath, OnlyTheDeadRanksNodeDropsWhatNamesItsSrqNumbers) {
    Net net(3, 2, requeueing());  // ranks 0, 1 on node 0; 2, 3 on node 1; 4, 5 on node 2
    // Rank 4 on node 2 has the numbers rank 2 (node 1) has, as two HCAs may well give.
    net[0].peer(4).srqs = net[0].peer(2).srqs;
    Message to2, to4;
    send(net[0], 2, to2);
    send(net[0], 4, to4);
    net[0].cm().peer_died(2);
    net.run();
    EXPECT_TRUE(to2.done);
    EXPECT_EQ(to2.status, IBV_WC_REM_ABORT_ERR);
    EXPECT_FALSE(to4.done);  // queued for a live rank of another node: sent, waiting for its completion
    NodeLink &link = *net[0].peer(4).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    ASSERT_EQ(ini_of(link)->posted.size(), 1u);
    complete_all(link);
    EXPECT_EQ(to4.status, IBV_WC_SUCCESS);
}

// A node crashes: every rank of it that this process sends to dies, and its HCA answers nothing. The link's requests
// in flight would otherwise be retried for the whole retry budget, holding a flush or finalize for messages nobody
// will receive: the INI QP goes at once, what the queue held completes for the dead (nobody is told of a failure),
// and nothing is connected again toward that node.
TEST(ConnectionManagerPeerDeath, ANodeWhoseEveryRankDiedLosesItsConnectionAtOnce) {
    Net net(3, 2, requeueing());  // ranks 0, 1 on node 0; 2, 3 on node 1; 4, 5 on node 2
    Message to4, to5, to2;
    send(net[0], 4, to4);
    send(net[0], 5, to5);
    send(net[0], 2, to2);
    net.run();
    NodeLink &dead = *net[0].peer(4).link;
    ASSERT_EQ(dead.state(), NodeLink::State::connected);
    ASSERT_EQ(ini_of(dead)->posted.size(), 2u);  // in flight, never to be acknowledged
    const std::size_t inis = net.live_of(FakeQp::Kind::ini);
    net[0].cm().peer_died(4);
    net.run();
    EXPECT_FALSE(dead.node_dead());  // rank 5 still lives there: the link goes through it
    EXPECT_FALSE(to4.done);
    net[0].cm().peer_died(5);
    EXPECT_FALSE(dead.node_dead());  // only the BTL knows the node has no other rank
    net[0].cm().node_died(5);
    EXPECT_TRUE(dead.node_dead());
    EXPECT_EQ(dead.state(), NodeLink::State::failed);
    EXPECT_EQ(ini_of(dead), nullptr);
    EXPECT_EQ(net.live_of(FakeQp::Kind::ini), inis - 1);
    net.run();
    EXPECT_TRUE(to4.done);
    EXPECT_TRUE(to5.done);
    EXPECT_EQ(to5.status, IBV_WC_REM_ABORT_ERR);
    EXPECT_TRUE(dead.queue().idle());
    EXPECT_TRUE(net[0].failures.empty());
    EXPECT_EQ(dead.state(), NodeLink::State::failed);  // not connected again
    EXPECT_TRUE(net[0].cm().own_work_finished());
    // The other node's link is untouched.
    NodeLink &live = *net[0].peer(2).link;
    ASSERT_EQ(live.state(), NodeLink::State::connected);
    complete_all(live);
    EXPECT_EQ(to2.status, IBV_WC_SUCCESS);
}

// A rank dies before anything was sent to its node (ob1 adds processes when it first sends to them): the link made
// later through it, as the TGT QPs' spread chose, connects through a live rank of the node instead of waiting for
// the dead one's answer until the connect timeout.
TEST(ConnectionManagerPeerDeath, ALinkMadeAfterItsOwnersDeathConnectsThroughALiveRank) {
    Net net(3, 2, requeueing());
    net[0].cm().link_for(net[4].address(), 4);  // the link to node 2 goes through rank 4, not a peer yet
    net[0].cm().peer_died(4);
    Message to5;
    send(net[0], 5, to5);
    net.run();
    NodeLink &link = *net[0].peer(5).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(link.owner(), 5u);
    EXPECT_EQ(net[5].cm().owned_tgts(), 1u);
    EXPECT_EQ(net[4].cm().owned_tgts(), 0u);
    complete_all(link);
    EXPECT_EQ(to5.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(net[0].failures.empty());
}
