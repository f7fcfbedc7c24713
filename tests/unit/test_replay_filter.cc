// SPDX-License-Identifier: BSD-3-Clause
// Exactly once across a lost rail (src/core/replay_filter.h, src/core/failover.h): the verdict on a copy, the
// receiver's counts by connection, the sender's numbering per connection and ring, and, through a SendQueue on a
// fake QP, what a failed send's copy says about where it was posted: the paths no cluster test walks (a send
// queued while its connection was made, a first connection whose acknowledgement died, a connection made again
// after an eviction, an eager grant as a connection's first message, positions that wrap).
#include "src/core/failover.h"
#include "src/core/peer.h"
#include "src/core/replay_filter.h"
#include "src/core/send_queue.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

using namespace xrc;

namespace {

int fake_post_send(ibv_qp *, ibv_send_wr *, ibv_send_wr **) {
    return 0;
}

struct FakeQp {
    ibv_context context{};
    ibv_qp qp{};
    explicit FakeQp(std::uint32_t qpn) {
        context.ops.post_send = fake_post_send;
        qp.context = &context;
        qp.qp_num = qpn;
    }
};

// What the BTL's failover callback keeps of a failed send: the header its copy would carry.
std::vector<ForwardedHeader> g_copies;
const std::uint8_t kPrefix[8] = {0xfe, 0x80, 0, 0, 0, 0, 0, 1};
void forward_on_failure(SendOp *op, ibv_wc_status status) noexcept {
    if (status != IBV_WC_SUCCESS) g_copies.push_back(forwarded_header(kPrefix, 7, op, 3));
}

// Every send posted on `q` is acknowledged (each is signaled: failover signals every send).
void acknowledge_all(SendQueue &q) {
    while (!q.idle()) {
        ibv_wc wc{};
        wc.wr_id = reinterpret_cast<std::uintptr_t>(&q);
        q.on_completion(wc);
    }
}

ibv_wc failed_completion(SendQueue &q) {
    ibv_wc wc{};
    wc.wr_id = reinterpret_cast<std::uintptr_t>(&q);
    wc.status = IBV_WC_RETRY_EXC_ERR;
    return wc;
}

// A sender's peer on a link whose queue is `q`, with the first-message flag of a new connection.
struct Sender {
    SendQueue q{64, 1, 0};
    Peer peer;
    std::vector<std::unique_ptr<SendOp>> ops;
    unsigned char data[64] = {};
    Sender() {
        peer.srqs = {SrqEntry{0x10, 4096}};
        peer.queue = &q;
        peer.imm_flags = kImmFirst;
    }
    // A data send kept for replay, prepared, numbered and posted or queued as the BTL does.
    SendOp &send() {
        ops.push_back(std::make_unique<SendOp>());
        SendOp &op = *ops.back();
        const bool ring = peer.prepare(op, data, 8, 1, 5, sizeof(data));
        peer.number(op, ring);
        op.on_complete = forward_on_failure;
        EXPECT_EQ(q.post_or_queue(op), 0);
        return op;
    }
};

// The receiver's side of one connection: what it counted and what it does with each copy.
struct Verdicts {
    int delivered = 0, dropped = 0;
};
Verdicts judge_all(const std::vector<ForwardedHeader> &copies, const SourceCounts &counts) {
    Verdicts v;
    for (const auto &h : copies)
        (judge_forwarded(h, counts.of(source_of(h))) == ReplayVerdict::deliver ? v.delivered : v.dropped)++;
    return v;
}

}  // namespace

TEST(ReplayFilter, WhatTheRailDidNotDeliverIsDelivered) {
    EXPECT_EQ(judge_replay(5, 5), ReplayVerdict::deliver);
    EXPECT_EQ(judge_replay(7, 5), ReplayVerdict::deliver);
    EXPECT_EQ(judge_replay(0, 0), ReplayVerdict::deliver);
}

TEST(ReplayFilter, DeliveredButUnacknowledgedIsDropped) {
    EXPECT_EQ(judge_replay(3, 5), ReplayVerdict::duplicate);
    EXPECT_EQ(judge_replay(4, 5), ReplayVerdict::duplicate);
}

TEST(ReplayFilter, CopiesInAnyOrder) {
    const std::uint32_t order[] = {6, 7, 3, 4, 5};
    int delivered = 0, dropped = 0;
    for (std::uint32_t seq : order) (judge_replay(seq, 5) == ReplayVerdict::deliver ? delivered : dropped)++;
    EXPECT_EQ(delivered, 3);
    EXPECT_EQ(dropped, 2);
}

TEST(ReplayFilter, PositionsWrap) {
    // 2^32 - 2 messages went before; the rail delivered four more, so the count wrapped to 2.
    const std::uint32_t taken = 2;
    EXPECT_EQ(judge_replay(0xfffffffeu, taken), ReplayVerdict::duplicate);
    EXPECT_EQ(judge_replay(0xffffffffu, taken), ReplayVerdict::duplicate);
    EXPECT_EQ(judge_replay(1, taken), ReplayVerdict::duplicate);
    EXPECT_EQ(judge_replay(2, taken), ReplayVerdict::deliver);
    // Near the top without a wrap: the plain comparison and the signed one agree.
    EXPECT_EQ(judge_replay(0xfffffff0u, 0xfffffff1u), ReplayVerdict::duplicate);
    EXPECT_EQ(judge_replay(0xfffffff1u, 0xfffffff1u), ReplayVerdict::deliver);
}

TEST(SourceCounts, CountsPerConnectionAndForgetsClosedOnes) {
    SourceCounts counts;
    const SourceKey a = source_key(0x20, 0x1234), b = source_key(0x21, 0x1234), c = source_key(0x20, 0x99);
    for (int i = 0; i < 3; ++i) counts.count(a);
    counts.count(b);
    counts.count(a);
    EXPECT_EQ(counts.of(a), 4u);
    EXPECT_EQ(counts.of(b), 1u);
    EXPECT_EQ(counts.of(c), 0u);
    EXPECT_EQ(counts.sources(), 2u);
    counts.forget(a);  // the cached one
    EXPECT_EQ(counts.of(a), 0u);
    counts.count(a);
    EXPECT_EQ(counts.of(a), 1u);
    // Connections made and closed one after another (an evicting sender): the table holds the live ones only.
    for (std::uint32_t qpn = 0x100; qpn < 0x100 + 1000; ++qpn) {
        for (int i = 0; i < 5; ++i) counts.count(source_key(0x30, qpn), i == 0);
        counts.forget(source_key(0x30, qpn));
    }
    EXPECT_EQ(counts.sources(), 2u);
}

TEST(SourceCounts, AFirstMessageCountsFromZeroAgain) {
    SourceCounts counts;
    const SourceKey a = source_key(0x20, 0x1234);
    for (int i = 0; i < 10; ++i) counts.count(a);
    counts.count(a, true);  // the QP numbers came back for a new connection
    counts.count(a);
    EXPECT_EQ(counts.of(a), 2u);
}

TEST(SendStreams, NumbersPerConnectionAndRing) {
    SendStreams s;
    EXPECT_EQ(s.number(false, true), 0u);
    EXPECT_EQ(s.number(false, false), 1u);
    EXPECT_EQ(s.number(true, false), 0u);  // the ring's own stream
    EXPECT_EQ(s.number(false, false), 2u);
    s.unnumber(false);
    EXPECT_EQ(s.number(false, false), 2u);
    EXPECT_EQ(s.number(false, true), 0u);  // a new connection
    EXPECT_EQ(s.number(true, false), 1u);  // the ring goes on
}

// A send queued while its connection was being made fails before it reached any QP: it cannot have been
// delivered, so its copy is fresh. Stamped with the connection's QP from the sender's endpoint instead, it was
// judged against the previous connection's count and dropped: lost.
TEST(FailoverNumbering, ASendThatNeverReachedAQpIsFresh) {
    g_copies.clear();
    Sender s;
    FakeQp old_qp(0x51);
    s.q.open(&old_qp.qp, 0x61);
    for (int i = 0; i < 3; ++i) s.send();
    acknowledge_all(s.q);
    s.q.stop();
    s.q.detach();  // evicted
    s.peer.imm_flags = kImmFirst;
    for (int i = 0; i < 3; ++i) s.send();  // queued: the next connection is being made
    s.q.fail(IBV_WC_RETRY_EXC_ERR);        // ... and it fails (the rail went with it)
    ASSERT_EQ(g_copies.size(), 3u);
    SourceCounts receiver;
    for (int i = 0; i < 3; ++i) receiver.count(source_key(0x61, 0x51), i == 0);
    for (const auto &h : g_copies) EXPECT_EQ(stream_of(h), ReplayStream::fresh);
    const Verdicts v = judge_all(g_copies, receiver);
    EXPECT_EQ(v.delivered, 3);
    EXPECT_EQ(v.dropped, 0);
}

// The first connection's first sends reach the receiver, their acknowledgements die with the rail: each copy names
// the connection it was posted on, so the receiver drops the ones it had. Stamped with the endpoint's last known
// INI QP (none yet: the sends had queued until the connection was made), they were delivered twice.
TEST(FailoverNumbering, AFirstConnectionsDeliveredSendsAreDroppedOnce) {
    g_copies.clear();
    Sender s;
    for (int i = 0; i < 4; ++i) s.send();  // queued before the connection exists
    FakeQp qp(0x52);
    s.q.open(&qp.qp, 0x62);  // posted now
    SourceCounts receiver;
    receiver.count(source_key(0x62, 0x52), true);  // 0 and 1 arrived
    receiver.count(source_key(0x62, 0x52));
    s.q.on_completion(failed_completion(s.q));  // no acknowledgement came back for any
    ASSERT_EQ(g_copies.size(), 4u);
    for (std::uint32_t i = 0; i < 4; ++i) {
        EXPECT_EQ(stream_of(g_copies[i]), ReplayStream::srq);
        EXPECT_EQ(g_copies[i].seq, i);
        EXPECT_EQ(source_of(g_copies[i]), source_key(0x62, 0x52));
    }
    const Verdicts v = judge_all(g_copies, receiver);
    EXPECT_EQ(v.dropped, 2);
    EXPECT_EQ(v.delivered, 2);
}

// A connection made again after an eviction numbers from 0 with its first send, and the receiver counts the new
// connection from 0: the copies of the second connection are judged against the second connection only.
TEST(FailoverNumbering, AConnectionMadeAgainIsJudgedOnItsOwn) {
    g_copies.clear();
    Sender s;
    SourceCounts receiver;
    FakeQp first(0x53);
    s.q.open(&first.qp, 0x63);
    for (int i = 0; i < 5; ++i) {
        s.send();
        receiver.count(source_key(0x63, 0x53), i == 0);
    }
    acknowledge_all(s.q);
    s.q.stop();
    s.q.detach();
    receiver.forget(source_key(0x63, 0x53));  // its CLOSE
    s.peer.imm_flags = kImmFirst;             // what the connection manager sets when it closes a link
    FakeQp second(0x54);
    s.q.open(&second.qp, 0x64);
    for (int i = 0; i < 3; ++i) s.send();
    receiver.count(source_key(0x64, 0x54), true);  // only the first arrived
    s.q.on_completion(failed_completion(s.q));
    ASSERT_EQ(g_copies.size(), 3u);
    EXPECT_EQ(g_copies[0].seq, 0u);
    const Verdicts v = judge_all(g_copies, receiver);
    EXPECT_EQ(v.dropped, 1);
    EXPECT_EQ(v.delivered, 2);
}

// An eager RDMA grant or request sent as a connection's first message took the first-message flag, so neither
// side's count started again with that connection (the receiver does not count control messages, the sender does
// not number them). It leaves the flag to the first data message now.
TEST(FailoverNumbering, AControlMessageLeavesTheFirstMessageFlag) {
    Sender s;
    SendOp control;
    EagerControl message{};
    s.peer.prepare_control(control, &message, sizeof(message), 1);
    EXPECT_EQ(ntohl(control.wr.imm_data) & kImmFirst, 0u);
    EXPECT_NE(ntohl(control.wr.imm_data) & kImmControl, 0u);
    EXPECT_EQ(s.peer.imm_flags, kImmFirst);
    FakeQp qp(0x55);
    s.q.open(&qp.qp, 0x65);
    SendOp &data = s.send();
    EXPECT_NE(ntohl(data.wr.imm_data) & kImmFirst, 0u);
    EXPECT_EQ(data.replay_seq, 0u);
}

TEST(ForwardedHeader, RoundTripAndRefusals) {
    SendOp op;
    op.replay_stream = ReplayStream::ring;
    op.replay_seq = 41;
    op.posted_on = source_key(1, 2);
    const ForwardedHeader h = forwarded_header(kPrefix, 9, &op, 17);
    unsigned char bytes[sizeof(ForwardedHeader) + 4] = {};
    std::memcpy(bytes, &h, sizeof(h));
    const auto read = read_forwarded_header(bytes, sizeof(bytes));
    ASSERT_TRUE(read.has_value());
    EXPECT_EQ(stream_of(*read), ReplayStream::ring);
    EXPECT_EQ(read->seq, 41u);
    EXPECT_EQ(read->rank, 17u);
    EXPECT_EQ(read->tag, 9u);
    EXPECT_EQ(std::memcmp(read->subnet_prefix, kPrefix, 8), 0);
    EXPECT_FALSE(read_forwarded_header(bytes, sizeof(ForwardedHeader) - 1).has_value());  // short
    bytes[0] ^= 1;                                                                        // another version
    EXPECT_FALSE(read_forwarded_header(bytes, sizeof(bytes)).has_value());
    bytes[0] ^= 1;
    bytes[5] = 3;  // no such stream
    EXPECT_FALSE(read_forwarded_header(bytes, sizeof(bytes)).has_value());
    EXPECT_EQ(stream_of(forwarded_header(kPrefix, 9, nullptr, 17)), ReplayStream::fresh);  // forwarded from the start
}

TEST(Failover, TheSiblingIsTheFirstUsableOtherRail) {
    struct Rail {
        bool lost;
    };
    std::vector<std::unique_ptr<Rail>> rails;
    for (bool lost : {false, true, false, false}) rails.push_back(std::make_unique<Rail>(Rail{lost}));
    const auto usable = [](const Rail &r) { return !r.lost; };
    EXPECT_EQ(choose_sibling(rails, rails[0].get(), usable), rails[2].get());
    EXPECT_EQ(choose_sibling(rails, rails[2].get(), usable), rails[0].get());
    rails[0]->lost = rails[3]->lost = true;
    EXPECT_EQ(choose_sibling(rails, rails[2].get(), usable), nullptr);
}

TEST(Failover, DrainStopsWhenARailIsFoundEmptyOrAtItsBound) {
    int queued = 5;
    EXPECT_TRUE(drain_until_empty([&] { return queued > 0 ? (--queued, 1) : 0; }, 100));
    EXPECT_EQ(queued, 0);
    int calls = 0;
    EXPECT_FALSE(drain_until_empty([&] { return ++calls; }, 10));  // a peer that keeps sending
    EXPECT_EQ(calls, 10);
}

TEST(Failover, ACopyIsJudgedAgainstWhatTheDrainedRailTook) {
    SourceCounts taken_here;
    const SourceKey connection = source_key(0x40, 0x50);
    for (int i = 0; i < 3; ++i) taken_here.count(connection);
    ForwardedHeader header = forwarded_header(kPrefix, 9, nullptr, 17);
    header.stream = static_cast<std::uint8_t>(ReplayStream::srq);
    header.tgt_qpn = 0x40;
    header.ini_qpn = 0x50;
    EXPECT_EQ(taken_on(header, taken_here, nullptr), 3u);
    header.stream = static_cast<std::uint8_t>(ReplayStream::ring);
    EXPECT_EQ(taken_on(header, taken_here, nullptr), 0u);  // no ring granted: delivered
    header.stream = static_cast<std::uint8_t>(ReplayStream::srq);

    Counters counters{};
    int queued = 2, undrained = 0;
    const auto poll = [&] { return queued > 0 ? (--queued, 1) : 0; };
    // The drain comes first: what it takes off the rail counts before the copy is judged.
    const auto taken = [&] { return taken_on(header, taken_here, nullptr) + (2 - queued); };
    header.seq = 4;  // the rail delivered 0-4 once drained
    EXPECT_TRUE(delivered_already(
        header, poll, taken, [&] { ++undrained; }, 10, counters));
    EXPECT_EQ(queued, 0);
    header.seq = 5;
    EXPECT_FALSE(delivered_already(
        header, poll, taken, [&] { ++undrained; }, 10, counters));
    EXPECT_EQ(counters.replays_dropped, 1u);
    EXPECT_EQ(counters.replays_delivered, 1u);
    EXPECT_EQ(undrained, 0);
    // A rail that keeps delivering: judged anyway, and said.
    EXPECT_FALSE(delivered_already(
        header, [] { return 1; }, taken, [&] { ++undrained; }, 10, counters));
    EXPECT_EQ(undrained, 1);
}

TEST(Failover, ACopyMetWhileDrainingIsNotDrainedAgain) {
    Counters counters{};
    ForwardedHeader header = forwarded_header(kPrefix, 9, nullptr, 17);
    int inner_polls = 0;
    bool inner = false;
    const auto poll = [&] {
        if (!inner) {  // the drain meets a copy, judged inside the poll
            inner = true;
            EXPECT_FALSE(delivered_already(
                header, [&] { return ++inner_polls; }, [] { return 0u; }, [] {}, 10, counters));
        }
        return 0;
    };
    EXPECT_FALSE(delivered_already(
        header, poll, [] { return 0u; }, [] {}, 10, counters));
    EXPECT_EQ(inner_polls, 0);
    EXPECT_EQ(counters.replays_delivered, 2u);  // fresh copies are delivered
}

TEST(Failover, RailsByFabricAndTheSurvivorsNames) {
    struct Rail {
        std::uint8_t prefix[8];
        bool lost;
        std::string name;
    };
    std::vector<std::unique_ptr<Rail>> rails;
    rails.push_back(std::make_unique<Rail>(Rail{{1}, false, "a:1"}));
    rails.push_back(std::make_unique<Rail>(Rail{{2}, true, "b:1"}));
    rails.push_back(std::make_unique<Rail>(Rail{{3}, false, "c:1"}));
    const auto prefix_of = [](const Rail &r) -> const std::uint8_t * { return r.prefix; };
    const std::uint8_t two[8] = {2}, four[8] = {4};
    EXPECT_EQ(rail_on_fabric(rails, two, prefix_of), rails[1].get());
    EXPECT_EQ(rail_on_fabric(rails, four, prefix_of), nullptr);
    const auto carries = [](const Rail &r) { return !r.lost; };
    const auto name = [](const Rail &r) { return r.name; };
    EXPECT_EQ(surviving_rails(rails, rails[1].get(), carries, name), "a:1, c:1");
    EXPECT_EQ(surviving_rails(rails, rails[0].get(), carries, name), "c:1");
    EXPECT_EQ(forwardable_size(65536, 3), 65536u - 2 * sizeof(ForwardedHeader));
    EXPECT_EQ(forwardable_size(65536, 1), 65536u);
}

TEST(Failover, EachLostNodeIsReportedOnce) {
    LostNodes lost;
    EXPECT_TRUE(lost.first(4));
    EXPECT_TRUE(lost.first(7));
    EXPECT_FALSE(lost.first(4));
}

TEST(Failover, DeferredCompletionsComeOldestFirstAndMayDeferAgain) {
    DeferredOps deferred;
    SendOp ops[3];
    for (SendOp &op : ops) deferred.push(&op);
    std::vector<const SendOp *> order;
    deferred.complete_all([&](SendOp *op) {
        order.push_back(op);
        if (op == &ops[1]) deferred.push(op);  // owed again: the next call
    });
    EXPECT_EQ(order, (std::vector<const SendOp *>{&ops[0], &ops[1], &ops[2]}));
    order.clear();
    deferred.complete_all([&](SendOp *op) { order.push_back(op); });
    EXPECT_EQ(order, (std::vector<const SendOp *>{&ops[1]}));
    order.clear();
    deferred.complete_all([&](SendOp *op) { order.push_back(op); });
    EXPECT_TRUE(order.empty());
}
