// SPDX-License-Identifier: BSD-3-Clause
// A LID change through the connection manager (ADDRESS, ADDRESS_ACK): the announcement reaches every process of
// the job, each updates its stored addresses of the port and moves the paths of its QPs toward it (the link's INI
// QP, the TGT QP made for a sender on that node, not twice through a handle), a connection made afterwards goes to
// the new LID, lost datagrams are retransmitted and finally given up, and ADDRESS datagrams that do not fit the
// sender's stored address change nothing.
#include "cm_test_net.h"

#include <gtest/gtest.h>

using namespace xrc;
using namespace xrc::cm_test;

namespace {

constexpr std::uint16_t kNewLid = 0x40;

// No connection back toward an initiator: each test looks at one direction's QPs.
CmConfig one_way() {
    CmConfig c;
    c.reciprocate = false;
    return c;
}

// The subnet manager gives node `node`'s port (ranks node*ppn ..) the LID `lid`; each rank hears LID_CHANGE.
void move_node(Net &net, std::uint32_t node, std::uint32_t ppn, std::uint16_t lid) {
    for (std::uint32_t r = node * ppn; r < (node + 1) * ppn; ++r) {
        const std::uint16_t old = net[r].address().lid;
        net[r].take_lid(lid);
        net[r].cm().announce_lid(old, lid);
    }
}

// Rank 0 (node 0) talks to ranks 2 and 3 (node 1, rank 2 owns the TGT QP, rank 3 holds a handle on it).
NodeLink &connect_0_to_node_1(Net &net, Message &a, Message &b) {
    send(net[0], 2, a);
    send(net[0], 3, b);
    net.run();
    NodeLink &link = *net[0].peer(2).link;
    EXPECT_EQ(link.state(), NodeLink::State::connected);
    net[3].cm().hold_tgt(link.tgt_qpn(), link.ini_qpn());
    complete_all(link);
    return link;
}

}  // namespace

TEST(CmAddressChange, EveryProcessLearnsTheNewLidAndTheInitiatorsPathMoves) {
    Net net(2, 2, one_way());
    Message a, b;
    NodeLink &link = connect_0_to_node_1(net, a, b);
    FakeQp *ini = ini_of(link);
    ASSERT_NE(ini, nullptr);
    const std::uint16_t old = ini->dlid;
    EXPECT_EQ(old, net[2].published_lid());
    move_node(net, 1, 2, kNewLid);
    net.run();
    for (std::uint32_t r : {0u, 1u})
        for (std::uint32_t peer : {2u, 3u}) EXPECT_EQ(net[r].lid_seen(peer), kNewLid) << r << " of " << peer;
    EXPECT_EQ(net[2].lid_seen(3), kNewLid);  // the node's own ranks share the port
    EXPECT_EQ(ini->dlid, kNewLid);
    EXPECT_EQ(ini->migrations, 1);
    const Counters &c0 = net[0].cm().counters();
    EXPECT_EQ(c0.peer_lid_changes, 1u);  // told by rank 2 (its link's owner, and its share of the job)
    EXPECT_EQ(c0.paths_migrated, 1u);
    EXPECT_EQ(c0.cm_rejected, 0u);
    EXPECT_EQ(net[1].cm().counters().peer_lid_changes, 1u);  // no link: told by its share (rank 3)
    for (std::uint32_t r : {2u, 3u}) {
        EXPECT_EQ(net[r].cm().counters().lid_changes, 1u);
        EXPECT_EQ(net[r].cm().unanswered_addresses(), 0u);
    }
    // The link carries on: a send after the change goes out on the same, migrated, INI QP.
    Message c;
    send(net[0], 3, c);
    net.run();
    EXPECT_EQ(ini_of(link), ini);
    EXPECT_EQ(ini->posted.size(), 3u);
    // The same LID again (CLIENT_REREGISTER after LID_CHANGE) announces nothing.
    const std::uint64_t sent = net[2].cm().counters().cm_datagrams_sent;
    net[2].cm().announce_lid(kNewLid, kNewLid);
    net[2].cm().announce_lid(net[2].published_lid(), kNewLid);
    EXPECT_EQ(net[2].cm().counters().cm_datagrams_sent, sent);
    EXPECT_EQ(net[2].cm().counters().lid_changes, 1u);
}

TEST(CmAddressChange, AConnectionMadeAfterTheChangeGoesToTheNewLid) {
    Net net(2, 2);
    move_node(net, 1, 2, kNewLid);
    net.run();
    // Rank 1 never talked to node 1: its first send connects to the LID it was told (the ACCEPT comes from the
    // new LID, which its stored address must say, or the ACCEPT is dropped).
    Message a;
    send(net[1], 3, a);
    net.run();
    NodeLink &link = *net[1].peer(3).link;
    ASSERT_EQ(link.state(), NodeLink::State::connected);
    EXPECT_EQ(ini_of(link)->dlid, kNewLid);
    EXPECT_EQ(net[1].cm().counters().cm_rejected, 0u);
    EXPECT_TRUE(net[1].failures.empty());
}

TEST(CmAddressChange, TheSendersNewLidMovesItsTgtQpOnceWhoeverHoldsIt) {
    Net net(2, 2, one_way());
    Message a, b;
    NodeLink &link = connect_0_to_node_1(net, a, b);
    FakeQp *tgt = net.qps.at(link.tgt_qpn()).get();
    EXPECT_EQ(tgt->dlid, net[0].published_lid());
    move_node(net, 0, 2, kNewLid);
    net.run();
    EXPECT_EQ(tgt->dlid, kNewLid);
    EXPECT_EQ(tgt->migrations, 1);  // the creator and the handle's holder both looked: moved once
    EXPECT_EQ(net[2].cm().counters().paths_migrated + net[3].cm().counters().paths_migrated, 1u);
    EXPECT_EQ(ini_of(link)->migrations, 0);  // the changed side's own INI QP: the HCA sends from the new LID
    EXPECT_EQ(net[2].lid_seen(0), kNewLid);
    EXPECT_EQ(net[3].lid_seen(1), kNewLid);
}

TEST(CmAddressChange, LostAnswersAreRetransmittedAndAnsweredAgain) {
    Net net(2, 1);
    int acks_lost = 0;
    net.lose = [&](const Datagram &d) {
        const auto m = decode_cm(d.bytes);
        return m && m->type == CmType::AddressAck && acks_lost++ < 2;
    };
    move_node(net, 1, 1, kNewLid);
    net.run();
    EXPECT_EQ(net[0].lid_seen(1), kNewLid);
    EXPECT_EQ(net[1].cm().unanswered_addresses(), 0u);
    EXPECT_EQ(net[1].cm().counters().cm_retransmissions, 2u);
    EXPECT_EQ(net[0].cm().counters().peer_lid_changes, 1u);
    EXPECT_EQ(net[0].cm().counters().cm_duplicates, 2u);
}

TEST(CmAddressChange, AnUnreachablePeerIsGivenUpAfterTheConnectTimeout) {
    CmConfig c;
    c.connect_timeout_us = 2000000;
    Net net(2, 1, c);
    net.lose = [](const Datagram &d) { return d.to == 0; };
    move_node(net, 1, 1, kNewLid);
    net.run();
    EXPECT_EQ(net[1].cm().unanswered_addresses(), 0u);
    EXPECT_GE(net[1].cm().counters().cm_retransmissions, 3u);
    EXPECT_EQ(net[0].lid_seen(1), net[1].published_lid());
}

TEST(CmAddressChange, AddressDatagramsThatDoNotFitChangeNothing) {
    Net net(2, 1);
    ConnectionManager &cm = net[0].cm();
    const PortAddress from = net[1].address();  // LID 2, the published one
    CmMessage m;
    m.type = CmType::Address;
    m.jobid = 7;
    m.src_rank = 1;
    m.dst_rank = 0;
    m.token = net[0].address().token;
    m.generation = 1;
    m.port_guid = port_identity(from);
    m.old_lid = from.lid;
    m.new_lid = kNewLid;
    auto deliver = [&](const CmMessage &x, std::uint16_t slid, std::uint32_t qpn) {
        const CmBytes b = encode_cm(x);
        cm.on_datagram(b, slid, qpn);
    };
    int rejected = 0;
    auto expect_nothing = [&](const char *what) {
        ++rejected;
        EXPECT_EQ(net[0].lid_seen(1), from.lid) << what;
        EXPECT_EQ(cm.counters().cm_rejected, static_cast<std::uint64_t>(rejected)) << what;
        EXPECT_EQ(cm.counters().peer_lid_changes, 0u) << what;
    };
    CmMessage bad = m;
    bad.token ^= 1;
    deliver(bad, kNewLid, from.cm_qpn);
    expect_nothing("another token");
    bad = m;
    bad.jobid = 8;
    deliver(bad, kNewLid, from.cm_qpn);
    expect_nothing("another job");
    bad = m;
    bad.old_lid = 5;  // not the LID we know the sender by
    deliver(bad, kNewLid, from.cm_qpn);
    expect_nothing("another old LID");
    deliver(m, kNewLid + 1, from.cm_qpn);  // from a LID it does not announce
    expect_nothing("from another LID");
    deliver(m, kNewLid, from.cm_qpn + 1);
    expect_nothing("from another UD QP");
    bad = m;
    bad.port_guid = port_identity(net[0].address());  // a port the sender is not on
    deliver(bad, kNewLid, from.cm_qpn);
    expect_nothing("another port");
    bad = m;
    bad.new_lid = bad.old_lid;
    deliver(bad, bad.old_lid, from.cm_qpn);
    expect_nothing("the same LID twice (malformed)");
    // Any other type from the new LID before the ADDRESS: the source check is as strict as ever.
    CmMessage connect;
    connect.type = CmType::Connect;
    connect.jobid = 7;
    connect.src_rank = 1;
    connect.dst_rank = 0;
    connect.token = m.token;
    connect.generation = 1;
    connect.ini_qpn = 0x4242;
    deliver(connect, kNewLid, from.cm_qpn);
    expect_nothing("a CONNECT from the new LID");
    EXPECT_EQ(cm.owned_tgts(), 0u);
    // An ADDRESS_ACK for an announcement this process never made is only counted.
    CmMessage ack = m;
    ack.type = CmType::AddressAck;
    deliver(ack, from.lid, from.cm_qpn);
    EXPECT_EQ(cm.counters().cm_stale, 1u);
    EXPECT_EQ(net[0].lid_seen(1), from.lid);
    // The genuine article is accepted and answered.
    deliver(m, kNewLid, from.cm_qpn);
    EXPECT_EQ(net[0].lid_seen(1), kNewLid);
    EXPECT_EQ(cm.counters().peer_lid_changes, 1u);
    ASSERT_FALSE(net.wire.empty());
    const auto answer = decode_cm(net.wire.back().bytes);
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->type, CmType::AddressAck);
    EXPECT_EQ(answer->new_lid, kNewLid);
    EXPECT_EQ(net.wire.back().to, 1u);
}
