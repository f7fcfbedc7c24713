// SPDX-License-Identifier: BSD-3-Clause
// EagerManager, the eager RDMA protocol without MPI or a device: processes whose managers exchange control
// messages through test sinks, write into each other's granted rings with a simulated RDMA WRITE (a memcpy to the
// address the work request names) and post credit reports on send queues over fake QPs. Checks the handshake
// (grant, refusal when full or off, a request before the peer is added), the data delivered, credit reports,
// removal of a peer, and that malformed control messages and corrupt footers create nothing.
#include "src/core/eager_manager.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace xrc;

namespace {

// What a fake QP saw of one work request; an RDMA WRITE's bytes are read at post time, as for an inline send.
struct PostedWrite {
    ibv_wr_opcode opcode;
    std::uint64_t remote_addr;
    std::uint32_t rkey;
    std::vector<unsigned char> bytes;
};

struct FakeQp {
    ibv_context context{};
    ibv_qp qp{};
    std::vector<PostedWrite> posted;
};

int record_post(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **) {
    auto *fake = reinterpret_cast<FakeQp *>(reinterpret_cast<char *>(qp) - offsetof(FakeQp, qp));
    const auto *src = reinterpret_cast<const unsigned char *>(static_cast<std::uintptr_t>(wr->sg_list[0].addr));
    fake->posted.push_back({wr->opcode, wr->wr.rdma.remote_addr, wr->wr.rdma.rkey,
                            std::vector<unsigned char>(src, src + wr->sg_list[0].length)});
    return 0;
}

struct Sink {
    struct Sent {
        Peer *to;
        EagerControl message;
    };
    struct Delivered {
        Peer *from;
        std::uint8_t tag;
        std::string data;
    };
    std::map<std::uint32_t, Peer *> peers;
    bool send_ok = true;
    std::vector<Sent> sent;
    std::vector<Delivered> delivered;
    std::vector<EagerRingFailure> failures;
    std::vector<EagerEvent> notes;

    Peer *peer_of(std::uint32_t rank) {
        auto it = peers.find(rank);
        return it != peers.end() ? it->second : nullptr;
    }
    bool send_control(Peer &to, const EagerControl &message) {
        if (!send_ok) return false;
        sent.push_back({&to, message});
        return true;
    }
    void deliver(std::uint32_t, Peer *from, std::uint8_t tag, unsigned char *data, std::uint32_t length) {
        delivered.push_back({from, tag, std::string(reinterpret_cast<const char *>(data), length)});
    }
    void ring_failed(const EagerRingFailure &failure) { failures.push_back(failure); }
    void note(const EagerEvent &event) { notes.push_back(event); }
    bool noted(EagerNote what) const {
        for (const auto &n : notes)
            if (n.what == what) return true;
        return false;
    }
};

constexpr std::uint32_t kSlots = 4, kSlotSize = 256;

EagerConfig config_of(std::uint32_t rank, std::uint32_t max_peers) {
    EagerConfig c;
    c.my_rank = rank;
    c.max_peers = max_peers;
    c.slots = kSlots;
    c.slot_size = kSlotSize;
    c.threshold = 2;
    c.inline_reports = true;
    return c;
}

// One process: its manager, its sink, and its peers (one per other rank), each with a send queue over a fake QP.
struct Process {
    std::uint32_t rank;
    Counters counters;
    EagerManager manager;
    Sink sink;
    struct Remote {
        FakeQp fake;
        SendQueue queue{64, 1, 0};
        Peer peer;
    };
    std::map<std::uint32_t, std::unique_ptr<Remote>> remotes;

    Process(std::uint32_t my_rank, std::uint32_t max_peers) : rank(my_rank) {
        EXPECT_TRUE(manager.init(config_of(my_rank, max_peers), counters));
    }
    // The peer of `other` exists (attached), not yet added to the manager.
    Peer &make(std::uint32_t other) {
        auto r = std::make_unique<Remote>();
        r->fake.context.ops.post_send = record_post;
        r->fake.qp.context = &r->fake.context;
        r->queue.open(&r->fake.qp);
        r->peer.rank = other;
        r->peer.srqs = {SrqEntry{64, 100 + other}, SrqEntry{4096, 200 + other}};
        r->peer.queue = &r->queue;
        Peer &peer = r->peer;
        remotes[other] = std::move(r);
        return peer;
    }
    Peer &add(std::uint32_t other) {
        Peer &peer = remotes.count(other) != 0 ? remotes[other]->peer : make(other);
        sink.peers[other] = &peer;
        manager.peer_added(peer, sink);
        return peer;
    }
    Peer &peer(std::uint32_t other) { return remotes.at(other)->peer; }
    FakeQp &qp(std::uint32_t other) { return remotes.at(other)->fake; }
};

// Hands every control message `from` sent so far to its destination's manager.
void carry(Process &from, std::map<std::uint32_t, Process *> to) {
    std::vector<Sink::Sent> sent;
    sent.swap(from.sink.sent);
    for (const auto &s : sent)
        to.at(s.to->rank)->manager.on_control(&s.message, sizeof(s.message), to.at(s.to->rank)->sink);
}

// Sends `payload` from a sender's peer into the ring it was granted: the work request prepare() builds, then the
// simulated RDMA WRITE. False when the message took the SRQ path.
bool ring_send(Peer &peer, const std::string &payload, std::uint8_t tag) {
    std::vector<unsigned char> buffer(kSlotSize, 0);
    std::memcpy(buffer.data(), payload.data(), payload.size());
    SendOp op;
    const bool ring =
        peer.prepare(op, buffer.data(), static_cast<std::uint32_t>(payload.size()), 0, tag, buffer.size());
    if (!ring) return false;
    std::memcpy(reinterpret_cast<void *>(static_cast<std::uintptr_t>(op.wr.wr.rdma.remote_addr)), buffer.data(),
                op.sge.length);
    return true;
}

// A and B, each added to the other; A has asked B for a ring and B granted it.
struct Granted : ::testing::Test {
    Process a{0, 2}, b{1, 2};
    Peer *b_at_a = nullptr, *a_at_b = nullptr;
    std::uint64_t credit_addr = 0;  // A's credit word, as its request named it
    void SetUp() override {
        b_at_a = &a.add(1);
        a_at_b = &b.add(0);
        a.manager.request(*b_at_a, a.sink);
        ASSERT_EQ(a.sink.sent.size(), 1u);
        EXPECT_EQ(a.sink.sent[0].message.type, EagerControlType::Request);
        EXPECT_EQ(b_at_a->eager_state, EagerState::requested);
        credit_addr = a.sink.sent[0].message.addr;
        carry(a, {{1, &b}});
        ASSERT_EQ(b.sink.sent.size(), 1u);
        EXPECT_EQ(b.sink.sent[0].message.type, EagerControlType::Grant);
        carry(b, {{0, &a}});
    }
};

}  // namespace

TEST_F(Granted, GrantsARingAndDeliversWhatIsWrittenIntoIt) {
    EXPECT_EQ(b.manager.rings_granted(), 1u);
    EXPECT_EQ(a_at_b->granted != nullptr, true);
    EXPECT_EQ(b_at_a->eager_state, EagerState::active);
    EXPECT_EQ(a.manager.credit_words_available(), 1u);
    EXPECT_EQ(a.counters.eager_ring_requests, 1u);
    EXPECT_EQ(b.counters.eager_rings_granted, 1u);
    EXPECT_EQ(a.counters.eager_rings_used, 1u);
    EXPECT_TRUE(b.sink.noted(EagerNote::granted));
    EXPECT_TRUE(a.sink.noted(EagerNote::using_ring));

    ASSERT_TRUE(ring_send(*b_at_a, "hello", 7));
    ASSERT_TRUE(ring_send(*b_at_a, std::string(100, 'x'), 9));
    EXPECT_EQ(b.manager.poll(b.sink), 2);
    ASSERT_EQ(b.sink.delivered.size(), 2u);
    EXPECT_EQ(b.sink.delivered[0].from, a_at_b);
    EXPECT_EQ(b.sink.delivered[0].tag, 7);
    EXPECT_EQ(b.sink.delivered[0].data, "hello");
    EXPECT_EQ(b.sink.delivered[1].tag, 9);
    EXPECT_EQ(b.sink.delivered[1].data, std::string(100, 'x'));
    EXPECT_EQ(b.manager.poll(b.sink), 0);
    EXPECT_TRUE(b.sink.failures.empty());
}

TEST_F(Granted, ReportsCreditsIntoTheWritersWordOnceHalfTheRingIsRead) {
    // Fill the ring with the largest messages: the writer must stop until the reader reports.
    const std::string big(eager_max_payload(kSlotSize), 'z');
    int sent = 0;
    while (ring_send(*b_at_a, big, 1)) ++sent;
    EXPECT_EQ(sent, int(kSlots));
    EXPECT_EQ(b.manager.poll(b.sink), sent);
    ASSERT_EQ(b.sink.delivered.size(), std::size_t(sent));
    for (const auto &d : b.sink.delivered) EXPECT_EQ(d.data, big);
    // The report went to A's node: an RDMA WRITE of the consumed position into the credit word A asked with.
    const FakeQp &qp = b.qp(0);
    ASSERT_EQ(qp.posted.size(), 1u);
    EXPECT_EQ(qp.posted[0].opcode, IBV_WR_RDMA_WRITE);
    EXPECT_EQ(qp.posted[0].remote_addr, credit_addr);
    ASSERT_EQ(qp.posted[0].bytes.size(), sizeof(std::uint64_t));
    std::uint64_t reported = 0;
    std::memcpy(&reported, qp.posted[0].bytes.data(), sizeof(reported));
    EXPECT_EQ(reported, std::uint64_t(kSlots) * kSlotSize);
    EXPECT_EQ(b.counters.credit_writes, 1u);
    // Landing in A's credit word, it opens the ring again.
    EXPECT_FALSE(b_at_a->eager.can_send(big.size()));
    std::memcpy(reinterpret_cast<void *>(static_cast<std::uintptr_t>(qp.posted[0].remote_addr)), &reported,
                sizeof(reported));
    EXPECT_TRUE(b_at_a->eager.can_send(big.size()));
    ASSERT_TRUE(ring_send(*b_at_a, "again", 2));
    EXPECT_EQ(b.manager.poll(b.sink), 1);
    EXPECT_EQ(b.sink.delivered.back().data, "again");
}

TEST_F(Granted, ARemovedWritersMessagesAreDeliveredFromNobody) {
    ASSERT_TRUE(ring_send(*b_at_a, "late", 3));
    b.sink.peers.erase(0);
    b.manager.peer_removed(*a_at_b);
    EXPECT_EQ(a_at_b->granted, nullptr);
    EXPECT_EQ(b.manager.poll(b.sink), 1);
    ASSERT_EQ(b.sink.delivered.size(), 1u);
    EXPECT_EQ(b.sink.delivered[0].from, nullptr);
    EXPECT_EQ(b.sink.delivered[0].data, "late");
    EXPECT_EQ(b.manager.rings_granted(), 1u);  // still polled; not given to anyone else
}

TEST_F(Granted, AFooterThatFailsItsCheckStopsTheRingAndIsReported) {
    ASSERT_TRUE(ring_send(*b_at_a, "good", 4));
    EXPECT_EQ(b.manager.poll(b.sink), 1);
    const std::uint64_t position = a_at_b->granted->consumed();
    {
        // A claims the next span as for any message, and writes it with a length no slot holds.
        SendOp op;
        std::vector<unsigned char> buffer(kSlotSize, 0);
        ASSERT_TRUE(b_at_a->prepare(op, buffer.data(), 8, 0, 4, buffer.size()));
        auto *footer = reinterpret_cast<EagerFooter *>(buffer.data() + eager_padded(8));
        footer->length = 1u << 20;
        std::memcpy(reinterpret_cast<void *>(static_cast<std::uintptr_t>(op.wr.wr.rdma.remote_addr)), buffer.data(),
                    op.sge.length);
    }
    EXPECT_EQ(b.manager.poll(b.sink), 1);
    ASSERT_EQ(b.sink.failures.size(), 1u);
    EXPECT_EQ(b.sink.failures[0].writer, a_at_b);
    EXPECT_EQ(b.sink.failures[0].tag, 4);
    EXPECT_EQ(b.sink.failures[0].position, position);
    EXPECT_EQ(b.sink.delivered.size(), 1u);  // nothing handed up
    EXPECT_EQ(b.manager.poll(b.sink), 0);    // stopped
}

TEST(EagerManager, RefusesWhenEveryRingIsGivenAndTheAskerFreesItsWord) {
    Process a{0, 2}, b{1, 1}, c{2, 2};
    a.add(1);
    c.add(1);
    b.add(0);
    b.add(2);
    a.manager.request(a.peer(1), a.sink);
    c.manager.request(c.peer(1), c.sink);
    EXPECT_EQ(c.manager.credit_words_available(), 1u);
    carry(a, {{1, &b}});
    carry(c, {{1, &b}});
    ASSERT_EQ(b.sink.sent.size(), 2u);
    EXPECT_EQ(b.sink.sent[0].message.type, EagerControlType::Grant);
    EXPECT_EQ(b.sink.sent[1].message.type, EagerControlType::Refuse);
    EXPECT_EQ(b.sink.sent[1].message.rank, 1u);
    EXPECT_EQ(b.counters.eager_rings_granted, 1u);
    EXPECT_EQ(b.counters.eager_rings_refused, 1u);
    EXPECT_TRUE(b.sink.noted(EagerNote::refused_all_given));
    EXPECT_EQ(b.peer(2).granted, nullptr);
    carry(b, {{0, &a}, {2, &c}});
    EXPECT_EQ(a.peer(1).eager_state, EagerState::active);
    EXPECT_EQ(c.peer(1).eager_state, EagerState::off);
    EXPECT_EQ(c.manager.credit_words_available(), 2u);
    EXPECT_EQ(c.counters.eager_ring_refusals, 1u);
    EXPECT_TRUE(c.sink.noted(EagerNote::refused_by));
}

TEST(EagerManager, OffItRefusesEveryRequestAndIgnoresGrants) {
    Process a{0, 2}, off{1, 0};
    EXPECT_FALSE(off.manager.enabled());
    EXPECT_EQ(off.manager.threshold(), 0u);
    a.add(1);
    Peer &a_at_off = off.add(0);
    EXPECT_EQ(a_at_off.eager_state, EagerState::off);
    a.manager.request(a.peer(1), a.sink);
    carry(a, {{1, &off}});
    ASSERT_EQ(off.sink.sent.size(), 1u);
    EXPECT_EQ(off.sink.sent[0].message.type, EagerControlType::Refuse);
    EXPECT_TRUE(off.sink.noted(EagerNote::refused_off));
    EXPECT_EQ(off.counters.eager_rings_refused, 1u);
    // A grant it never asked for changes nothing.
    EagerControl grant{};
    grant.magic_version = kEagerControlMagic;
    grant.type = EagerControlType::Grant;
    grant.rank = 0;
    grant.addr = 4096;
    grant.slots = kSlots;
    grant.slot_size = kSlotSize;
    off.manager.on_control(&grant, sizeof(grant), off.sink);
    EXPECT_EQ(a_at_off.eager_state, EagerState::off);
    EXPECT_FALSE(a_at_off.eager.active());
    EXPECT_EQ(off.counters.eager_rings_used, 0u);
}

TEST(EagerManager, ARequestBeforeThePeerIsAddedIsAnsweredWhenItIs) {
    Process a{0, 2}, b{1, 2};
    a.add(1);
    b.make(0);  // attached at B, but B has not added it: B's sink does not know rank 0 yet
    a.manager.request(a.peer(1), a.sink);
    const Sink::Sent request = a.sink.sent.at(0);
    carry(a, {{1, &b}});
    b.manager.on_control(&request.message, sizeof(request.message), b.sink);  // a duplicate is ignored
    EXPECT_TRUE(b.sink.sent.empty());
    EXPECT_TRUE(b.sink.noted(EagerNote::asked_early));
    EXPECT_EQ(b.manager.rings_granted(), 0u);
    b.add(0);
    ASSERT_EQ(b.sink.sent.size(), 1u);
    EXPECT_EQ(b.sink.sent[0].message.type, EagerControlType::Grant);
    EXPECT_EQ(b.sink.sent[0].to, &b.peer(0));
    carry(b, {{0, &a}});
    EXPECT_EQ(a.peer(1).eager_state, EagerState::active);
}

TEST(EagerManager, AFailedControlSendLeavesNothingTaken) {
    Process a{0, 2}, b{1, 2};
    a.add(1);
    b.add(0);
    a.sink.send_ok = false;
    a.manager.request(a.peer(1), a.sink);
    EXPECT_EQ(a.peer(1).eager_state, EagerState::off);
    EXPECT_EQ(a.manager.credit_words_available(), 2u);
    EXPECT_EQ(a.counters.eager_ring_requests, 0u);
    EagerControl request{};
    request.magic_version = kEagerControlMagic;
    request.type = EagerControlType::Request;
    request.rank = 0;
    request.addr = 4096;
    b.sink.send_ok = false;
    b.manager.on_control(&request, sizeof(request), b.sink);
    EXPECT_EQ(b.manager.rings_granted(), 0u);
    EXPECT_EQ(b.peer(0).granted, nullptr);
    EXPECT_EQ(b.counters.eager_rings_granted, 0u);
}

TEST(EagerManager, RunsOutOfCreditWordsAndStaysOff) {
    Process a{0, 1};
    Peer &first = a.add(1);
    Peer &second = a.add(2);
    a.manager.request(first, a.sink);
    a.manager.request(second, a.sink);
    EXPECT_EQ(first.eager_state, EagerState::requested);
    EXPECT_EQ(second.eager_state, EagerState::off);
    EXPECT_EQ(a.sink.sent.size(), 1u);
}

TEST(EagerManager, MalformedControlMessagesAreDroppedWithoutCreatingAnything) {
    Process a{0, 2}, b{1, 2};
    Peer &b_at_a = a.add(1);
    Peer &a_at_b = b.add(0);
    a.manager.request(b_at_a, a.sink);
    a.sink.sent.clear();
    EagerControl good{};
    good.magic_version = kEagerControlMagic;
    good.rank = 1;
    good.addr = 4096;
    good.slots = kSlots;
    good.slot_size = kSlotSize;
    std::vector<std::vector<unsigned char>> bad;
    auto bytes_of = [](const EagerControl &c) {
        std::vector<unsigned char> v(sizeof(c));
        std::memcpy(v.data(), &c, sizeof(c));
        return v;
    };
    EagerControl c = good;
    c.type = EagerControlType::Grant;
    c.magic_version ^= 1;
    bad.push_back(bytes_of(c));  // wrong version
    c = good;
    c.type = static_cast<EagerControlType>(9);
    bad.push_back(bytes_of(c));  // unknown type
    c = good;
    c.type = EagerControlType::Grant;
    c.slot_size = 100;
    bad.push_back(bytes_of(c));  // slot size not in granules
    c.slot_size = kSlotSize;
    c.slots = 0;
    bad.push_back(bytes_of(c));  // empty ring
    c = good;
    c.type = EagerControlType::Request;
    c.addr = 0;
    bad.push_back(bytes_of(c));  // no credit word
    c = good;
    c.type = EagerControlType::Grant;
    auto truncated = bytes_of(c);
    truncated.pop_back();
    bad.push_back(truncated);
    bad.push_back({});
    for (const auto &message : bad) {
        a.manager.on_control(message.data(), message.size(), a.sink);
        b.manager.on_control(message.data(), message.size(), b.sink);
    }
    int drops = 0;
    for (const auto &n : a.sink.notes) drops += n.what == EagerNote::malformed_control;
    EXPECT_EQ(drops, int(bad.size()));
    EXPECT_TRUE(a.sink.sent.empty());
    EXPECT_TRUE(b.sink.sent.empty());
    EXPECT_EQ(b.manager.rings_granted(), 0u);
    EXPECT_EQ(a_at_b.granted, nullptr);
    EXPECT_EQ(b_at_a.eager_state, EagerState::requested);  // still waiting for a real answer
    EXPECT_FALSE(b_at_a.eager.active());
    EXPECT_EQ(a.manager.credit_words_available(), 1u);
    EXPECT_EQ(a.counters.eager_rings_used + a.counters.eager_ring_refusals + b.counters.eager_rings_granted +
                  b.counters.eager_rings_refused,
              0u);
    // A grant from a rank nobody asked, and one from a rank that is no peer, are ignored too.
    c = good;
    c.type = EagerControlType::Grant;
    c.rank = 7;
    a.manager.on_control(&c, sizeof(c), a.sink);
    b.manager.on_control(&c, sizeof(c), b.sink);
    EXPECT_EQ(b_at_a.eager_state, EagerState::requested);
    EXPECT_EQ(a.counters.eager_rings_used, 0u);
}

TEST(EagerManager, EachHandshakeNoteHasItsLogLine) {
    xrc::EagerEvent granted{xrc::EagerNote::granted, 5, 2, 8, 12352, 0};
    EXPECT_EQ(xrc::describe(granted).text, "eager RDMA ring 2 (8 x 12352 bytes) granted to rank 5");
    EXPECT_EQ(xrc::describe(granted).verbosity, 10);
    xrc::EagerEvent using_ring{xrc::EagerNote::using_ring, 3, 0, 8, 64, 0};
    EXPECT_EQ(xrc::describe(using_ring).text, "writing into rank 3's eager RDMA ring (8 x 64 bytes)");
    xrc::EagerEvent refused{xrc::EagerNote::refused_all_given, 4};
    EXPECT_EQ(xrc::describe(refused).text, "refused an eager RDMA ring to rank 4 (all given, btl_xrc_max_eager_rdma)");
    xrc::EagerEvent malformed{xrc::EagerNote::malformed_control, 0, 0, 0, 0, 13};
    EXPECT_EQ(xrc::describe(malformed).text, "dropped a malformed 13-byte control message");
    EXPECT_EQ(xrc::describe(malformed).verbosity, 1);
}

namespace {

// A ring write whose RDMA WRITE never landed (its connection timed out with it in flight): its span is claimed,
// nothing reaches the ring.
void lost_ring_send(Peer &peer, const std::string &payload, std::uint8_t tag) {
    std::vector<unsigned char> buffer(kSlotSize, 0);
    std::memcpy(buffer.data(), payload.data(), payload.size());
    SendOp op;
    ASSERT_TRUE(peer.prepare(op, buffer.data(), static_cast<std::uint32_t>(payload.size()), 0, tag, buffer.size()));
}

// What the BTL does with a copy of ring write `seq` (from 0) that came through the SRQs after a timeout: the rings
// are read first, the copy is judged against what the writer's ring took, and one delivered passes over its span.
// True when it was delivered.
bool deliver_copy(Process &reader, Peer &writer, std::uint32_t seq, const std::string &payload) {
    reader.manager.poll(reader.sink);
    if (judge_replay(seq, static_cast<std::uint32_t>(writer.granted->messages())) == ReplayVerdict::duplicate)
        return false;
    reader.manager.skip_copy(writer, seq, static_cast<std::uint32_t>(payload.size()));
    reader.sink.delivered.push_back({&writer, 0, payload});
    return true;
}

std::vector<std::string> data_of(const Sink &sink) {
    std::vector<std::string> data;
    for (const auto &d : sink.delivered) data.push_back(d.data);
    return data;
}

}  // namespace

TEST_F(Granted, ARingPausedByATimeoutIsWrittenAgainOnceItsReaderStandsWhereTheWritesStopped) {
    ASSERT_TRUE(ring_send(*b_at_a, "m0", 1));
    ASSERT_TRUE(ring_send(*b_at_a, std::string(100, '1'), 1));  // landed, its acknowledgement lost
    lost_ring_send(*b_at_a, std::string(200, '2'), 1);
    lost_ring_send(*b_at_a, "m3", 1);
    // The connection times out: the ring is paused, and the copies of what was not acknowledged come through the
    // SRQs, in order, before anything that follows.
    b_at_a->next_connection(RingAfter::paused);
    EXPECT_EQ(b_at_a->eager_state, EagerState::paused);
    EXPECT_FALSE(b_at_a->eager.can_send(8));
    // The copies are sent as SRQ messages: none of them asks to resume, or the ask would overtake the ones after it.
    EXPECT_FALSE(b_at_a->count_srq_send(a.manager.threshold()));
    b_at_a->copies_queued();
    EXPECT_EQ(b_at_a->eager_state, EagerState::resume_due);
    EXPECT_FALSE(deliver_copy(b, *a_at_b, 1, std::string(100, '1')));
    EXPECT_TRUE(deliver_copy(b, *a_at_b, 2, std::string(200, '2')));
    EXPECT_TRUE(deliver_copy(b, *a_at_b, 3, "m3"));
    EXPECT_EQ(data_of(b.sink), (std::vector<std::string>{"m0", std::string(100, '1'), std::string(200, '2'), "m3"}));
    EXPECT_EQ(b.counters.eager_ring_skips, 2u);
    // The writer's next SRQ send asks to resume, saying where its writes stopped; the reader stands there.
    EXPECT_TRUE(b_at_a->count_srq_send(a.manager.threshold()));
    a.manager.request(*b_at_a, a.sink);
    EXPECT_EQ(b_at_a->eager_state, EagerState::resuming);
    ASSERT_EQ(a.sink.sent.size(), 1u);
    EXPECT_EQ(a.sink.sent[0].message.type, EagerControlType::Resume);
    EXPECT_EQ(a.counters.eager_ring_resumes_asked, 1u);
    carry(a, {{1, &b}});
    ASSERT_EQ(b.sink.sent.size(), 1u);
    EXPECT_EQ(b.sink.sent[0].message.type, EagerControlType::Resumed);
    EXPECT_EQ(b.counters.eager_ring_resumes_agreed, 1u);
    carry(b, {{0, &a}});
    EXPECT_EQ(b_at_a->eager_state, EagerState::active);
    EXPECT_EQ(a.counters.eager_rings_resumed, 1u);
    EXPECT_TRUE(a.sink.noted(EagerNote::resumed_by));
    // The next write lands where the reader looks.
    ASSERT_TRUE(ring_send(*b_at_a, "m4", 2));
    EXPECT_EQ(b.manager.poll(b.sink), 1);
    EXPECT_EQ(b.sink.delivered.back().data, "m4");
    EXPECT_TRUE(b.sink.failures.empty());
}

TEST_F(Granted, AResumeWhereTheRingDoesNotStandIsRefusedAndTheWriterStaysOnTheSrqs) {
    ASSERT_TRUE(ring_send(*b_at_a, "m0", 1));
    lost_ring_send(*b_at_a, "m1", 1);
    b_at_a->next_connection(RingAfter::paused);
    b_at_a->copies_queued();
    // The copy of m1 reached the reader without passing over its span (as a fresh message, say): the ring still
    // waits for it there, behind where the writer stopped.
    EXPECT_EQ(b.manager.poll(b.sink), 1);
    a.manager.request(*b_at_a, a.sink);
    carry(a, {{1, &b}});
    ASSERT_EQ(b.sink.sent.size(), 1u);
    EXPECT_EQ(b.sink.sent[0].message.type, EagerControlType::Refuse);
    EXPECT_EQ(b.counters.eager_ring_resumes_refused, 1u);
    EXPECT_TRUE(b.sink.noted(EagerNote::resume_refused));
    carry(b, {{0, &a}});
    EXPECT_EQ(b_at_a->eager_state, EagerState::off);
    EXPECT_FALSE(b_at_a->eager.can_send(8));
    EXPECT_FALSE(b_at_a->count_srq_send(a.manager.threshold()));  // never asked again
    EXPECT_EQ(a.counters.eager_ring_refusals, 0u);  // a refused grant request only; the reader counted this one
    EXPECT_EQ(a.counters.eager_rings_resumed, 0u);
}

TEST_F(Granted, AnAgreementThatComesAfterASecondTimeoutResumesToo) {
    ASSERT_TRUE(ring_send(*b_at_a, "m0", 1));
    b_at_a->next_connection(RingAfter::paused);
    b_at_a->copies_queued();
    a.manager.request(*b_at_a, a.sink);
    carry(a, {{1, &b}});
    // Times out again before the answer: nothing was written since the reader agreed.
    b_at_a->next_connection(RingAfter::paused);
    EXPECT_EQ(b_at_a->eager_state, EagerState::paused);
    carry(b, {{0, &a}});
    EXPECT_EQ(b_at_a->eager_state, EagerState::active);
    ASSERT_TRUE(ring_send(*b_at_a, "m1", 2));
    EXPECT_EQ(b.manager.poll(b.sink), 1);
    EXPECT_EQ(data_of(b.sink), (std::vector<std::string>{"m0", "m1"}));
}

TEST_F(Granted, OnlyTheCopyTheRingWaitsForPassesOverItsSpan) {
    ASSERT_TRUE(ring_send(*b_at_a, "m0", 1));
    lost_ring_send(*b_at_a, "m1", 1);
    lost_ring_send(*b_at_a, "m2", 1);
    EXPECT_EQ(b.manager.poll(b.sink), 1);
    EXPECT_FALSE(b.manager.skip_copy(*a_at_b, 0, 2));  // taken already
    EXPECT_FALSE(b.manager.skip_copy(*a_at_b, 2, 2));  // m1's span comes first
    EXPECT_FALSE(b.manager.skip_copy(*b_at_a, 1, 2));  // not a writer of this reader's rings
    EXPECT_EQ(a_at_b->granted->messages(), 1u);
    EXPECT_TRUE(b.manager.skip_copy(*a_at_b, 1, 2));
    EXPECT_TRUE(b.manager.skip_copy(*a_at_b, 2, 2));
    EXPECT_EQ(a_at_b->granted->messages(), 3u);
    EXPECT_EQ(b.counters.eager_ring_skips, 2u);
}

TEST_F(Granted, ARefusalOrAnAgreementNobodyAskedForChangesNothing) {
    EagerControl refuse{};
    refuse.magic_version = kEagerControlMagic;
    refuse.type = EagerControlType::Refuse;
    refuse.rank = 1;
    a.manager.on_control(&refuse, sizeof(refuse), a.sink);
    EagerControl resumed = refuse;
    resumed.type = EagerControlType::Resumed;
    a.manager.on_control(&resumed, sizeof(resumed), a.sink);
    EXPECT_EQ(b_at_a->eager_state, EagerState::active);
    EXPECT_EQ(a.counters.eager_ring_refusals + a.counters.eager_rings_resumed, 0u);
    ASSERT_TRUE(ring_send(*b_at_a, "still", 1));
    EXPECT_EQ(b.manager.poll(b.sink), 1);
}
