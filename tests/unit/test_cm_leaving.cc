// SPDX-License-Identifier: BSD-3-Clause
// The LEAVING exchange at message level: a TGT QP's creator that finalizes before its initiator closed tells it
// LEAVING; the initiator retires what it posted before (a fence toward the creator's SRQ while the creator still
// waits), answers LEAVING_ACK, signals every later send, and never destroys its INI QP while a send it carried may
// be unacknowledged.
#include "cm_test_net.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>

using namespace xrc;
using namespace xrc::cm_test;

namespace {

// Ranks 0,1 on node 0 and 2,3 on node 1. Rank 0 connects through rank 2 (the creator), reaches rank 3 too (which
// holds its own handle), and everything so far is acknowledged; rank 2 then finalizes and waits for rank 0.
NodeLink &connect_then_creator_finalizes(Net &net, Message &a, Message &b) {
    send(net[0], 2, a);
    send(net[0], 3, b);
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    net[3].cm().hold_tgt(link.tgt_qpn(), link.ini_qpn());
    complete_all(link);
    net[2].cm().begin_finalize();
    net.run(100000);
    complete_all(net[2].cm().link_for(net[0].address(), 0));
    net.run(100000);
    EXPECT_TRUE(net[2].cm().own_work_finished());
    EXPECT_FALSE(net[2].cm().finished());
    return link;
}

// An inline send (nobody waits for its completion: unsignaled unless the interval says otherwise) to `to`.
void send_inline(Process &from, std::uint32_t to, Message &m) {
    Peer &p = from.peer(to);
    p.prepare_srq(m.op, m.data, sizeof(m.data), 0, make_imm(0x41));
    m.op.on_complete = nullptr;
    ASSERT_EQ(p.queue->post_or_queue(m.op), 0);
}

std::size_t posts_to(const std::vector<ibv_send_wr> &posted, std::uint32_t srqn) {
    return static_cast<std::size_t>(std::count_if(
        posted.begin(), posted.end(), [&](const ibv_send_wr &wr) { return wr.qp_type.xrc.remote_srqn == srqn; }));
}

// The datagrams of `type` on the wire from `from` to `to`, decoded.
std::vector<CmMessage> on_wire(Net &net, CmType type, std::uint32_t from, std::uint32_t to) {
    std::vector<CmMessage> found;
    for (const Datagram &d : net.wire) {
        if (d.from != from || d.to != to) continue;
        if (const auto m = decode_cm(d.bytes); m.has_value() && m->type == type) found.push_back(*m);
    }
    return found;
}

}  // namespace

TEST(ConnectionManager, ASlowInitiatorRetiresWhatItPostedBeforeAnsweringLeaving) {
    Net net(2, 2);
    Message a, b;
    NodeLink &link = connect_then_creator_finalizes(net, a, b);
    FakeQp *ini = ini_of(link);
    ASSERT_NE(ini, nullptr);
    // Rank 0, alive and far from its finalize, sent to rank 3 unsignaled: only a later signaled request retires it.
    Message u1, u2;
    send_inline(net[0], 3, u1);
    send_inline(net[0], 3, u2);
    ASSERT_TRUE(link.queue().needs_fence());
    const std::uint32_t creator_srq = net[2].address().srqs.front().srq_num;
    const std::size_t fences_before = posts_to(ini->posted, creator_srq);
    ASSERT_NE(net[2].cm().leave_initiators(), "");
    net.run(20000);
    // LEAVING arrived: a fence toward the creator's SRQ (still there: the creator waits for the answer).
    EXPECT_EQ(posts_to(ini->posted, creator_srq), fences_before + 1);
    EXPECT_TRUE(ini->posted.back().send_flags & IBV_SEND_SIGNALED);
    EXPECT_EQ(net[2].cm().owned_tgts(), 1u) << "the creator dropped the TGT QP before the fence completed";
    EXPECT_FALSE(net[2].cm().finished());
    // From now on every send on the link is signaled, inline ones too.
    Message c;
    send_inline(net[0], 3, c);
    EXPECT_TRUE(ini->posted.back().send_flags & IBV_SEND_SIGNALED);
    EXPECT_EQ(ini->posted.back().qp_type.xrc.remote_srqn, net[3].address().srqs.front().srq_num);
    // The HCA acknowledges the fence (and what came before it): rank 0 answers, rank 2 drops its TGT QP.
    complete_all(link);
    net.run(20000);
    EXPECT_TRUE(net[2].cm().finished());
    EXPECT_EQ(net[2].cm().owned_tgts(), 0u);
    EXPECT_EQ(net[2].cm().drop_initiators(), "");
    EXPECT_EQ(net.live_tgts(), 1u);  // rank 3's handle keeps the TGT QP for rank 0's link
    // Rank 0 finalizes later, after one more send to rank 3: its close waits for that send (signaled), posts no
    // fence and tells only rank 3.
    net.lose = [](const Datagram &d) { return d.to == 2; };
    Message e;
    send_inline(net[0], 3, e);
    net[0].cm().begin_finalize();
    net.run(20000);
    EXPECT_EQ(link.state(), NodeLink::State::draining) << "closed before the last send was acknowledged";
    complete_all(link);
    net.run(1000000);
    EXPECT_TRUE(net[0].cm().finished());
    EXPECT_EQ(posts_to(net.retired_posts, creator_srq), fences_before + 1) << "a fence at close";
    EXPECT_EQ(net.live_tgts(), 0u);
    EXPECT_EQ(net[0].failures.size() + net[2].failures.size() + net[3].failures.size(), 0u);
}

TEST(ConnectionManager, ACreatorStopsWaitingForAnInitiatorThatDoesNotAnswer) {
    Net net(2, 2);
    Message a, b;
    connect_then_creator_finalizes(net, a, b);
    net.lose = [](const Datagram &d) { return d.to == 0; };  // rank 0 hears nothing (gone, or not progressing)
    const std::string left = net[2].cm().leave_initiators();
    net.run(3000000);
    EXPECT_FALSE(net[2].cm().finished());
    EXPECT_GT(net[2].cm().counters().cm_retransmissions, 0u);  // LEAVING retransmitted while it waits
    EXPECT_EQ(net[2].cm().drop_initiators(), left);
    EXPECT_TRUE(net[2].cm().finished());
    EXPECT_EQ(net[2].cm().owned_tgts(), 0u);
    EXPECT_EQ(net.live_tgts(), 1u);  // rank 3's handle
}

// A sender whose rail toward the creator is lost (its traffic failed over to another rail) cannot close what it had:
// at finalize the creator drops that sender's TGT QPs at once, only that sender's, without telling it LEAVING.
TEST(ConnectionManager, ACreatorDropsAtOnceTheTgtQpsOfASenderItLostTheRailTo) {
    Net net(2, 2);
    Message a, b;
    connect_then_creator_finalizes(net, a, b);
    EXPECT_EQ(net[2].cm().drop_initiator(1), "");  // rank 1 sent nothing to it: no TGT QP of its
    EXPECT_FALSE(net[2].cm().finished());
    const std::string dropped = net[2].cm().drop_initiator(0);
    EXPECT_NE(dropped.find("rank 0's INI QP"), std::string::npos) << dropped;
    EXPECT_TRUE(net[2].cm().finished());
    EXPECT_EQ(net[2].cm().owned_tgts(), 0u);
    EXPECT_EQ(net[2].cm().counters().cm_retransmissions, 0u);  // nothing was sent to it
    EXPECT_EQ(net[2].cm().drop_initiators(), "");
    EXPECT_EQ(net.live_tgts(), 1u);  // rank 3's handle
}

TEST(ConnectionManager, LeavingHeardTooLateForAFenceIsAnsweredWithoutOne) {
    CmConfig c;
    c.leaving_wait_us = 10000;
    Net net(2, 2, c);
    Message a, b;
    NodeLink &link = connect_then_creator_finalizes(net, a, b);
    FakeQp *ini = ini_of(link);
    Message u;
    send_inline(net[0], 3, u);
    ASSERT_TRUE(link.queue().needs_fence());
    const std::uint32_t creator_srq = net[2].address().srqs.front().srq_num;
    const std::size_t fences_before = posts_to(ini->posted, creator_srq);
    (void)net[2].cm().leave_initiators();
    // Rank 0's serving side hears LEAVING, but its progress (tick) comes only after half of the creator's wait.
    const std::vector<CmMessage> leaving = on_wire(net, CmType::Leaving, 2, 0);
    ASSERT_EQ(leaving.size(), 1u);
    for (const Datagram &d : std::deque<Datagram>(net.wire))
        if (d.to == 0) net[0].cm().on_datagram(d.bytes, net[2].address().lid, net[2].address().cm_qpn);
    net.wire.clear();
    net.clock += c.leaving_wait_us;
    net[0].cm().tick();
    EXPECT_EQ(posts_to(ini->posted, creator_srq), fences_before) << "a fence toward a creator that may be gone";
    const std::vector<CmMessage> acks = on_wire(net, CmType::LeavingAck, 0, 2);
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].tgt_qpn, leaving[0].tgt_qpn);
    EXPECT_EQ(acks[0].ini_qpn, link.ini_qpn());
    // The close posts no fence toward the creator (it may be gone): the unsignaled send is waited for until the
    // HCA's retry budget has passed (an unacknowledged request fails within it), then taken as acknowledged.
    net.lose = [](const Datagram &d) { return d.to == 2; };
    net[0].cm().begin_finalize();
    net.run(c.retry_budget_us + 1000000);
    EXPECT_TRUE(net[0].cm().finished());
    EXPECT_EQ(posts_to(net.retired_posts, creator_srq), fences_before);
}

namespace {

// Rank 2 (the creator) told rank 0 LEAVING; rank 0's serving side heard it, but its progress came only after half
// of rank 2's wait: it answered without a fence. Rank 0 had posted `u` to rank 3 (the node's other rank, which
// still receives through the TGT QP) unsignaled before, and the HCA has not acknowledged it yet.
NodeLink &answered_too_late_with_an_unsignaled_send(Net &net, const CmConfig &c, Message &a, Message &b, Message &u) {
    NodeLink &link = connect_then_creator_finalizes(net, a, b);
    send_inline(net[0], 3, u);
    EXPECT_TRUE(link.queue().needs_fence());
    (void)net[2].cm().leave_initiators();
    for (const Datagram &d : std::deque<Datagram>(net.wire))
        if (d.to == 0) net[0].cm().on_datagram(d.bytes, net[2].address().lid, net[2].address().cm_qpn);
    net.wire.clear();
    net.clock += c.leaving_wait_us;
    net[0].cm().tick();
    EXPECT_EQ(on_wire(net, CmType::LeavingAck, 0, 2).size(), 1u);
    net.lose = [](const Datagram &d) { return d.to == 2; };  // rank 2 has left
    return link;
}

bool retired(const Net &net, const Message &m) {
    return std::any_of(net.retired_posts.begin(), net.retired_posts.end(),
                       [&](const ibv_send_wr &wr) { return wr.sg_list == &m.op.sge; });
}

}  // namespace

// The finalize gap: after the creator left, the close posts no fence, and took the unsignaled send to rank 3 as
// retired at once: the INI QP was destroyed while that send could still need a retransmission (lost for rank 3).
TEST(ConnectionManagerLeaving, NoIniQpIsDestroyedWhileASendToAnotherRankMayBeUnacknowledged) {
    CmConfig c;
    c.leaving_wait_us = 10000;
    c.retry_budget_us = 500000;
    Net net(2, 2, c);
    Message a, b, u;
    NodeLink &link = answered_too_late_with_an_unsignaled_send(net, c, a, b, u);
    const std::uint32_t creator_srq = net[2].address().srqs.front().srq_num;
    const std::size_t fences_before = posts_to(ini_of(link)->posted, creator_srq);
    net[0].cm().begin_finalize();
    net.run(c.retry_budget_us / 2);
    EXPECT_EQ(link.state(), NodeLink::State::draining) << "closed with a send to rank 3 unacknowledged";
    EXPECT_EQ(net[0].cm().live_ini_qps(), 1u);
    EXPECT_FALSE(retired(net, u)) << "the INI QP carrying the send to rank 3 was destroyed";
    EXPECT_FALSE(net[0].cm().own_work_finished());
    // The budget passed and no error completion came: the HCA acknowledged it. Only now does the QP go.
    net.run(c.retry_budget_us);
    EXPECT_TRUE(net[0].cm().finished());
    EXPECT_TRUE(retired(net, u));
    EXPECT_EQ(posts_to(net.retired_posts, creator_srq), fences_before) << "a fence toward the creator that left";
    EXPECT_TRUE(net[0].failures.empty());
}

// Within the budget the retransmission fails (rank 3 is gone too, or the path is): the send is reported lost with
// the link, not forgotten.
TEST(ConnectionManagerLeaving, ASendThatFailsWhileTheCloseWaitsIsReportedNotForgotten) {
    CmConfig c;
    c.leaving_wait_us = 10000;
    c.retry_budget_us = 500000;
    Net net(2, 2, c);
    Message a, b, u;
    NodeLink &link = answered_too_late_with_an_unsignaled_send(net, c, a, b, u);
    net[0].cm().begin_finalize();
    net.run(c.retry_budget_us / 2);
    ASSERT_EQ(link.state(), NodeLink::State::draining);
    ibv_wc wc{};
    wc.wr_id = reinterpret_cast<std::uintptr_t>(&link.queue());
    wc.status = IBV_WC_RETRY_EXC_ERR;
    EXPECT_EQ(link.queue().on_completion(wc), IBV_WC_RETRY_EXC_ERR);
    net.run(c.retry_budget_us);
    EXPECT_EQ(link.state(), NodeLink::State::failed);
    ASSERT_EQ(net[0].failures.size(), 1u);
    EXPECT_TRUE(net[0].cm().own_work_finished());
}

// The port was down while the creator waited (no fence could go): the budget counts from when the port came back,
// since the HCA retransmits only from then on.
TEST(ConnectionManagerLeaving, ThePortDownDoesNotCountAgainstTheBudget) {
    CmConfig c;
    c.leaving_wait_us = 10000;
    c.retry_budget_us = 500000;
    Net net(2, 2, c);
    Message a, b, u;
    NodeLink &link = connect_then_creator_finalizes(net, a, b);
    send_inline(net[0], 3, u);
    const std::uint32_t creator_srq = net[2].address().srqs.front().srq_num;
    const std::size_t fences_before = posts_to(ini_of(link)->posted, creator_srq);
    net[0].cm().hold();
    (void)net[2].cm().leave_initiators();
    net.run(c.leaving_wait_us);  // no fence while held; answered once the creator's window is over
    EXPECT_EQ(posts_to(ini_of(link)->posted, creator_srq), fences_before);
    net.lose = [](const Datagram &d) { return d.to == 2; };
    net[0].cm().begin_finalize();
    net.run(2 * c.retry_budget_us);  // down longer than the budget: nothing was retransmitted meanwhile
    EXPECT_EQ(link.state(), NodeLink::State::draining);
    EXPECT_FALSE(retired(net, u));
    net[0].cm().resume();
    net.run(c.retry_budget_us / 2);
    EXPECT_EQ(link.state(), NodeLink::State::draining) << "the budget counted while the port was down";
    net.run(c.retry_budget_us);
    EXPECT_TRUE(net[0].cm().finished());
    EXPECT_TRUE(retired(net, u));
}

TEST(ConnectionManager, ALeavingAckThatMatchesNoLeavingTgtChangesNothing) {
    Net net(2, 2);
    Message a, b;
    NodeLink &link = connect_then_creator_finalizes(net, a, b);
    CmMessage m;
    m.type = CmType::LeavingAck;
    m.jobid = 7;
    m.src_rank = 0;
    m.dst_rank = 2;
    m.token = net[2].address().token;
    m.generation = link.generation();
    m.ini_qpn = link.ini_qpn();
    m.tgt_qpn = link.tgt_qpn();
    const auto deliver = [&](const CmMessage &msg) {
        const CmBytes bytes = encode_cm(msg);
        net[2].cm().on_datagram(bytes, net[0].address().lid, net[0].address().cm_qpn);
    };
    // Before LEAVING was sent: the creator is not waiting for an answer.
    std::uint64_t stale = net[2].cm().counters().cm_stale;
    deliver(m);
    EXPECT_EQ(net[2].cm().counters().cm_stale, ++stale);
    EXPECT_EQ(net[2].cm().owned_tgts(), 1u);
    net.lose = [](const Datagram &d) { return d.to == 0; };
    (void)net[2].cm().leave_initiators();
    // Naming another TGT QP, another INI QP, another generation.
    CmMessage wrong = m;
    wrong.tgt_qpn = m.tgt_qpn + 1;
    deliver(wrong);
    wrong = m;
    wrong.ini_qpn = m.ini_qpn + 1;
    deliver(wrong);
    wrong = m;
    wrong.generation = m.generation + 1;
    deliver(wrong);
    EXPECT_EQ(net[2].cm().counters().cm_stale, stale + 3);
    EXPECT_EQ(net[2].cm().owned_tgts(), 1u);
    // From another process claiming to be rank 0: dropped before it is read.
    const std::uint64_t rejected = net[2].cm().counters().cm_rejected;
    net[2].cm().on_datagram(encode_cm(m), net[1].address().lid, net[1].address().cm_qpn);
    EXPECT_EQ(net[2].cm().counters().cm_rejected, rejected + 1);
    EXPECT_EQ(net[2].cm().owned_tgts(), 1u);
    // The real answer releases it.
    deliver(m);
    EXPECT_EQ(net[2].cm().owned_tgts(), 0u);
    EXPECT_TRUE(net[2].cm().finished());
}

// A connection made ahead of need (eager) whose target finalized before answering: nothing reads the target's
// connection manager any more, so no answer ever comes. The initiator's own finalize does not wait for it (the
// connect timeout) since nothing waits to send on it; the target is told once to drop what it may have made.
TEST(ConnectionManagerLeaving, FinalizeDoesNotWaitForAnUnneededConnectionToARankThatLeft) {
    CmConfig cfg;
    cfg.connect_timeout_us = 60000000;
    cfg.reciprocate = false;
    Net net(2, 1, cfg);
    std::size_t closes = 0;
    net.lose = [&](const Datagram &d) {  // rank 1 left: nothing it is sent is read
        if (d.to == 1 && decode_cm(d.bytes)->type == CmType::Close) ++closes;
        return d.to == 1;
    };
    NodeLink &link = net[0].cm().link_for(net[1].address(), 1);
    net[0].cm().connect(link);
    net.run(200000);
    ASSERT_EQ(link.state(), NodeLink::State::connecting);
    ASSERT_EQ(closes, 0u);
    net[0].cm().begin_finalize();
    EXPECT_EQ(link.state(), NodeLink::State::idle);
    EXPECT_TRUE(net[0].cm().own_work_finished());
    EXPECT_TRUE(net[0].cm().finished());
    net.run(1000000);
    EXPECT_EQ(closes, 1u) << "told once, not waited for";
    EXPECT_EQ(net.live_of(FakeQp::Kind::ini), 0u);
    EXPECT_TRUE(net[0].failures.empty());
}

// The same with a send waiting on the connection: that one is still made (or fails at its deadline), never dropped
// silently by finalize.
TEST(ConnectionManagerLeaving, FinalizeKeepsMakingAConnectionASendWaitsFor) {
    CmConfig cfg;
    cfg.connect_timeout_us = 2000000;
    cfg.reciprocate = false;
    Net net(2, 1, cfg);
    bool gone = true;
    net.lose = [&](const Datagram &d) { return gone && d.to == 1; };
    Message a;
    send(net[0], 1, a);
    net.run(200000);
    NodeLink &link = *net[0].peer(1).link;
    ASSERT_EQ(link.state(), NodeLink::State::connecting);
    net[0].cm().begin_finalize();
    EXPECT_EQ(link.state(), NodeLink::State::connecting);
    EXPECT_FALSE(net[0].cm().own_work_finished());
    gone = false;  // it was only slow
    net.run(3000000);
    EXPECT_EQ(ini_of(link)->posted.size(), 1u);
    EXPECT_TRUE(net[0].failures.empty());
}

// A creator that says LEAVING is in its BTL finalize: it goes into the finalizing set the process's rails share.
TEST(ConnectionManagerLeaving, LeavingTellsEveryRailThatTheCreatorIsFinalizing) {
    Net net(2, 2);
    FinalizingRanks rails;
    net[0].cm().share_finalizing_ranks(&rails);
    Message a, b;
    (void)connect_then_creator_finalizes(net, a, b);
    EXPECT_FALSE(rails.contains(2));
    (void)net[2].cm().leave_initiators();
    net.run(100000);
    EXPECT_TRUE(rails.contains(2));
    EXPECT_TRUE(net[0].cm().said_finalizing(2));
    EXPECT_FALSE(net[0].cm().said_finalizing(3)) << "its node-mate said nothing";
}

// A rank whose rail here was finalized already answers nothing on it, while it said on another rail that it is
// finalizing. Our finalize then drops what waits only for it (it would drop it on arrival) when the connection
// times out, instead of counting it as lost (also after del_procs let go of its peer); a send to a rank that said
// nothing still fails.
TEST(ConnectionManagerLeaving, FinalizeDropsWhatOnlyARankFinalizingOnAnotherRailWaitsForWhenItIsSilent) {
    CmConfig cfg;
    cfg.connect_timeout_us = 2000000;
    cfg.reciprocate = false;
    Net net(2, 1, cfg);
    FinalizingRanks rails;
    net[0].cm().share_finalizing_ranks(&rails);
    net.lose = [](const Datagram &d) { return d.to == 1; };  // its manager on this rail is gone
    Message a;
    send(net[0], 1, a);
    net.run(200000);
    NodeLink &link = *net[0].peer(1).link;
    ASSERT_EQ(link.state(), NodeLink::State::connecting);
    rails.add(1);                        // LEAVING from it on the other rail
    net[0].cm().detach(net[0].peer(1));  // ob1's del_procs, before the BTL finalizes: its send stays queued
    net[0].cm().begin_finalize();
    net.run(3000000);
    EXPECT_TRUE(a.done);
    EXPECT_EQ(a.status, IBV_WC_WR_FLUSH_ERR) << "dropped, not failed";
    EXPECT_TRUE(net[0].failures.empty());
    EXPECT_EQ(link.state(), NodeLink::State::idle);
    EXPECT_TRUE(net[0].cm().own_work_finished());

    Net other(2, 1, cfg);  // the same without the other rail's word: the connection's failure is reported
    other.lose = [](const Datagram &d) { return d.to == 1; };
    Message c;
    send(other[0], 1, c);
    other.run(200000);
    other[0].cm().begin_finalize();
    other.run(3000000);
    EXPECT_TRUE(c.done);
    EXPECT_FALSE(other[0].failures.empty());
}

// The creator answered, no other rank of its node was sent a first message on the connection: the TGT QP goes
// with the creator's answer, so the connection closes, and a later send to the creator's node-mate goes over a
// new connection through that node-mate, not into a QP the node no longer has (nor through the leaving creator).
TEST(ConnectionManagerLeaving, AConnectionOnlyTheLeavingCreatorHoldsClosesAndTheNextSendGoesThroughANodeMate) {
    Net net(2, 2);
    Message a;
    send(net[0], 2, a);
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    const std::uint32_t old_tgt = link.tgt_qpn();
    complete_all(link);
    net[2].cm().begin_finalize();
    net.run(100000);
    (void)net[2].cm().leave_initiators();
    net.run(100000);
    EXPECT_NE(link.state(), NodeLink::State::connected) << "closing: only the leaving creator holds its TGT QP";
    Message b;
    send(net[0], 3, b);
    net.run(3000000);
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(link.owner(), 3u);
    EXPECT_NE(link.tgt_qpn(), old_tgt);
    EXPECT_TRUE(net[0].failures.empty());
}

// The creator accepted, then finalized and said LEAVING, all while this process did not progress: its serving side
// heard the ACCEPT and the LEAVING, but the queue was still closed. Opening it would post into a TGT QP the creator
// may have dropped already (its wait is bounded): the connection closes unused, and what waits (here for the creator
// and for its node-mate) goes over a new connection through that node-mate.
TEST(ConnectionManagerLeaving, AConnectionWhoseCreatorSaidLeavingBeforeItsQueueOpenedGoesUnused) {
    Net net(2, 2);
    std::deque<Datagram> withheld;  // what rank 0's serving side hears while rank 0 does not progress
    net.lose = [&](const Datagram &d) {
        if (d.to != 0) return false;
        withheld.push_back(d);
        return true;
    };
    Message a, b;
    send(net[0], 2, a);
    send(net[0], 3, b);
    net.run(100000);
    NodeLink &link = *net[0].peer(2).link;
    ASSERT_EQ(link.state(), NodeLink::State::connecting);
    ASSERT_EQ(link.owner(), 2u);
    net[2].cm().begin_finalize();
    net.run(100000);
    (void)net[2].cm().leave_initiators();
    net.run(100000);
    ASSERT_FALSE(withheld.empty());
    for (const Datagram &d : withheld) net[0].cm().on_datagram(d.bytes, net[2].address().lid, net[2].address().cm_qpn);
    ASSERT_EQ(link.state(), NodeLink::State::connected) << "the ACCEPT heard, the queue not opened yet";
    ASSERT_TRUE(net[0].cm().said_finalizing(2)) << "LEAVING heard";
    net.lose = [](const Datagram &) { return false; };
    net.run(3000000);
    EXPECT_FALSE(retired(net, a) || retired(net, b)) << "posted on the connection whose creator was leaving";
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(link.owner(), 3u);
    EXPECT_EQ(posts_to(ini_of(link)->posted, net[3].address().srqs.front().srq_num), 1u);
    EXPECT_TRUE(net[0].failures.empty());
}
