// SPDX-License-Identifier: BSD-3-Clause
// Eager RDMA rings: a sender (EagerChannel) and a receiver (EagerRing) connected by a simulated RDMA WRITE
// (a memcpy to where claim() says), checking data, span reuse and skips, flow control, stale payload that looks
// like a footer, malformed footers and the validation of control messages.
#include "src/core/eager_rdma.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

using namespace xrc;

namespace {

struct Link {
    static constexpr std::uint32_t kSlots = 4, kSlotSize = 256;
    alignas(64) unsigned char ring_memory[kSlots * kSlotSize] = {};
    std::uint64_t consumed_word = 0;  // the sender's credit word
    EagerRing ring;
    EagerChannel channel;

    Link() {
        ring.init(ring_memory, kSlots, kSlotSize);
        channel.activate(reinterpret_cast<std::uintptr_t>(ring_memory), 7, kSlots, kSlotSize, &consumed_word);
    }

    // What the BTL does: payload, padding, footer in one buffer; then "the HCA" writes it in one piece.
    void send(const std::string &payload, std::uint8_t tag, std::uint64_t ack = 0) {
        ASSERT_TRUE(channel.can_send(static_cast<std::uint32_t>(payload.size())));
        const auto length = static_cast<std::uint32_t>(payload.size());
        std::vector<unsigned char> wire(eager_wire_size(length), 0xee);
        std::memcpy(wire.data(), payload.data(), length);
        const std::uint64_t remote =
            channel.claim(length, tag, ack, reinterpret_cast<EagerFooter *>(wire.data() + eager_padded(length)));
        auto *dst = reinterpret_cast<unsigned char *>(static_cast<std::uintptr_t>(remote));
        ASSERT_GE(dst, ring_memory);
        ASSERT_LE(dst + wire.size(), ring_memory + sizeof(ring_memory));
        std::memcpy(dst, wire.data(), wire.size());
    }

    std::string receive(std::uint8_t *tag = nullptr) {
        EagerRing::Message m{};
        if (!ring.peek(m)) return "<none>";
        EXPECT_TRUE(m.well_formed);
        std::string s(reinterpret_cast<const char *>(m.data), m.length);
        if (tag != nullptr) *tag = m.tag;
        ring.release(m);
        return s;
    }

    void report() {
        consumed_word = ring.consumed();
        ring.reported(ring.consumed());
    }
};

constexpr std::uint32_t kMaxPayload = eager_max_payload(Link::kSlotSize);  // a message that takes a whole slot

TEST(EagerRdma, WireSizeKeepsTheFooterAligned) {
    EXPECT_EQ(eager_wire_size(0), 24u);
    EXPECT_EQ(eager_wire_size(1), 32u);
    EXPECT_EQ(eager_wire_size(8), 32u);
    EXPECT_EQ(eager_wire_size(9), 40u);
    EXPECT_EQ(eager_max_payload(4096), 4072u);
    EXPECT_EQ(eager_span(1), 64u);
    EXPECT_EQ(eager_span(40), 64u);
    EXPECT_EQ(eager_span(41), 128u);
    EXPECT_EQ(eager_span(kMaxPayload), Link::kSlotSize);
}

TEST(EagerRdma, SmallMessagesPackIntoGranules) {
    Link link;
    // A 1024-byte ring holds 4 of the largest messages but 13 one-byte ones: after the 13th, 192 bytes are left
    // below, less than the largest span, so the next one starts at the top again.
    for (int i = 0; i < 13; ++i) link.send("s" + std::to_string(i % 10), 1);
    EXPECT_FALSE(link.channel.can_send(1));
    for (int i = 0; i < 13; ++i) EXPECT_EQ(link.receive(), "s" + std::to_string(i % 10));
    EXPECT_EQ(link.receive(), "<none>");
}

TEST(EagerRdma, SpansThatWouldNotLeaveRoomForTheLargestSkipToTheTop) {
    Link link;
    // 64 + 256 + 256 + 256 = 832 from the top leaves 192 < 256 below: the next span starts at the top again,
    // and both ends know it without a marker.
    link.send("a", 1);
    for (int i = 0; i < 3; ++i) link.send(std::string(kMaxPayload, char('b' + i)), 1);
    EXPECT_FALSE(link.channel.can_send(1));  // the skipped 192 bytes count until consumed
    EXPECT_EQ(link.receive(), "a");
    link.report();
    EXPECT_TRUE(link.channel.can_send(1));
    link.send("top", 2);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(link.receive(), std::string(kMaxPayload, char('b' + i)));
    std::uint8_t tag = 0;
    EXPECT_EQ(link.receive(&tag), "top");
    EXPECT_EQ(tag, 2);
}

TEST(EagerRdma, MessagesArriveInOrderWithTheirTags) {
    Link link;
    EXPECT_EQ(link.receive(), "<none>");
    link.send("hello", 65);
    link.send("", 66);
    std::uint8_t tag = 0;
    EXPECT_EQ(link.receive(&tag), "hello");
    EXPECT_EQ(tag, 65);
    EXPECT_EQ(link.receive(&tag), "");
    EXPECT_EQ(tag, 66);
    EXPECT_EQ(link.receive(), "<none>");
}

TEST(EagerRdma, PayloadStartsEightByteAligned) {
    Link link;
    for (std::uint32_t len : {1u, 7u, 8u, 13u, 100u}) {
        link.send(std::string(len, 'x'), 1);
        EagerRing::Message m{};
        ASSERT_TRUE(link.ring.peek(m));
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(m.data) % 8, 0u) << len;
        EXPECT_EQ(m.length, len);
        link.ring.release(m);
        link.report();
    }
}

std::string big(int i) { return std::string(kMaxPayload, char('A' + i)); }

TEST(EagerRdma, FlowControlStopsAtTheRingSizeUntilReported) {
    Link link;
    for (int i = 0; i < 4; ++i) link.send(big(i), 1);
    EXPECT_FALSE(link.channel.can_send(0));  // the whole ring unconsumed
    EXPECT_EQ(link.receive(), big(0));
    EXPECT_EQ(link.receive(), big(1));
    EXPECT_FALSE(link.channel.can_send(0));  // consumed but not reported yet
    EXPECT_TRUE(link.ring.report_due());     // half the ring
    link.report();
    EXPECT_FALSE(link.ring.report_due());
    EXPECT_TRUE(link.channel.can_send(kMaxPayload));
    link.send(big(4), 1);  // reuses the top span: its old sequence number must not match any more
    link.send(big(5), 1);
    EXPECT_FALSE(link.channel.can_send(0));
    EXPECT_EQ(link.receive(), big(2));
    EXPECT_EQ(link.receive(), big(3));
    EXPECT_EQ(link.receive(), big(4));
    EXPECT_EQ(link.receive(), big(5));
    EXPECT_EQ(link.receive(), "<none>");
}

TEST(EagerRdma, PiggybackedAcksReturnCreditWithoutAReport) {
    Link link;
    for (int i = 0; i < 4; ++i) link.send(big(i), 1, 1000 + i);
    EXPECT_FALSE(link.channel.can_send(0));
    EagerRing::Message m{};
    ASSERT_TRUE(link.ring.peek(m));
    EXPECT_EQ(m.ack, 1000u);  // the footer carries the writer's count through
    link.receive();
    link.receive();
    EXPECT_EQ(link.ring.consumed(), 2u * Link::kSlotSize);
    // The reader answers with a message of its own that carries its position: the channel learns it from there.
    link.channel.note_ack(link.ring.consumed());
    EXPECT_TRUE(link.channel.can_send(kMaxPayload));
    link.send(big(4), 1);
    link.send(big(5), 1);
    EXPECT_FALSE(link.channel.can_send(0));
    link.channel.note_ack(Link::kSlotSize);  // older than what it knows: no effect
    link.channel.note_ack(99999);            // beyond what was sent: ignored
    EXPECT_FALSE(link.channel.can_send(0));
    // A report in the credit word beyond what was sent is ignored too.
    link.consumed_word = 99999;
    EXPECT_FALSE(link.channel.can_send(0));
}

TEST(EagerRdma, ManyRoundsCheckEveryByte) {
    Link link;
    std::mt19937 rng(42);
    for (int round = 0; round < 2000; ++round) {
        const std::uint32_t len = rng() % (eager_max_payload(Link::kSlotSize) + 1);
        std::string payload(len, '\0');
        for (auto &c : payload) c = static_cast<char>(rng());
        link.send(payload, static_cast<std::uint8_t>(round));
        std::uint8_t tag = 0;
        ASSERT_EQ(link.receive(&tag), payload) << round;
        EXPECT_EQ(tag, static_cast<std::uint8_t>(round));
        if (link.ring.report_due()) link.report();
    }
}

// Streams of random sizes, several messages in flight, consumed in random batches over many laps of the ring.
// Payloads are 64-bit words equal to sequence numbers soon to come, so a footer position that still held old
// payload would be taken for a message: the receiver must have cleared it.
TEST(EagerRdma, RandomStreamsAcrossLapsNeverMistakeOldPayloadForAFooter) {
    Link link;
    std::mt19937 rng(1234);
    std::deque<std::string> in_flight;
    std::uint64_t sent = 0, received = 0;
    while (received < 20000) {
        for (int burst = rng() % 8; burst > 0; --burst) {
            const std::uint32_t len = rng() % 2 ? 8 * (rng() % (kMaxPayload / 8 + 1)) : rng() % (kMaxPayload + 1);
            if (!link.channel.can_send(len)) break;
            std::string payload(len, '\0');
            for (std::uint32_t k = 0; k + 8 <= len; k += 8) {
                const std::uint64_t future = sent + 2 + k / 8 % 8;
                std::memcpy(&payload[k], &future, 8);
            }
            link.send(payload, static_cast<std::uint8_t>(sent));
            in_flight.push_back(payload);
            ++sent;
        }
        for (int take = rng() % 8; take > 0 && !in_flight.empty(); --take) {
            std::uint8_t tag = 0;
            ASSERT_EQ(link.receive(&tag), in_flight.front()) << received;
            EXPECT_EQ(tag, static_cast<std::uint8_t>(received));
            in_flight.pop_front();
            ++received;
        }
        if (in_flight.empty()) {
            ASSERT_EQ(link.receive(), "<none>") << received;
        }
        // The BTL reports at half a ring; here also whenever the sender is stuck, to keep the stream going.
        if (link.ring.report_due() || !link.channel.can_send(0)) link.report();
    }
}

TEST(EagerRdma, OldPayloadThatLooksLikeTheNextFooterIsNotAMessage) {
    Link link;
    // Lap 1: message 1 fills the top span with 64-bit words 6; three more fill the ring.
    std::string sixes(kMaxPayload, '\0');
    for (std::uint32_t k = 0; k + 8 <= kMaxPayload; k += 8) {
        const std::uint64_t six = 6;
        std::memcpy(&sixes[k], &six, 8);
    }
    link.send(sixes, 1);
    for (int i = 1; i < 4; ++i) link.send(big(i), 1);
    for (int i = 0; i < 4; ++i) link.receive();
    link.report();
    // Lap 2: message 5 takes the top granule; message 6 would end where message 1's payload held a 6.
    link.send("five", 1);
    EXPECT_EQ(link.receive(), "five");
    EXPECT_EQ(link.receive(), "<none>");
    link.send("six", 1);
    EXPECT_EQ(link.receive(), "six");
}

TEST(EagerRdma, ReleaseClearsEveryPossibleFooterWordOfTheSpan) {
    Link link;
    link.send(std::string(kMaxPayload, '\xff'), 1);
    EXPECT_EQ(link.receive(), std::string(kMaxPayload, '\xff'));
    for (std::uint32_t granule_end = 64; granule_end <= Link::kSlotSize; granule_end += 64) {
        std::uint64_t word;
        std::memcpy(&word, link.ring_memory + sizeof(link.ring_memory) - granule_end + 56, 8);
        EXPECT_EQ(word, 0u) << granule_end;
    }
}

TEST(EagerRdma, ASkippedSpanIsPassedOverAndClearedWhetherItsWriteLandedOrNot) {
    Link link;
    link.send(std::string(kMaxPayload, '\xff'), 1);  // landed, never read: its copy was delivered instead
    link.ring.skip(kMaxPayload);
    std::vector<unsigned char> never_landed(eager_wire_size(100));
    link.channel.claim(100, 1, 0, reinterpret_cast<EagerFooter *>(never_landed.data() + eager_padded(100)));
    link.ring.skip(100);
    EXPECT_EQ(link.ring.messages(), 2u);
    EXPECT_EQ(link.ring.consumed(), link.channel.position());
    EXPECT_EQ(link.receive(), "<none>");
    link.report();
    // Around the ring: every span the skipped ones took is written and read again, old bytes never mistaken.
    for (int i = 0; i < 12; ++i) {
        link.send("after " + std::to_string(i), 2);
        EXPECT_EQ(link.receive(), "after " + std::to_string(i));
        link.report();
    }
}

TEST(EagerRdma, APausedChannelKeepsItsPlaceAndResumesThere) {
    Link link;
    link.send("one", 1);
    const std::uint64_t position = link.channel.position();
    link.channel.pause();
    EXPECT_FALSE(link.channel.can_send(0));
    link.channel.pause();  // twice: still resumes with its old limit
    EXPECT_EQ(link.channel.position(), position);
    EXPECT_EQ(link.channel.written(), 1u);
    link.channel.resume();
    EXPECT_TRUE(link.channel.can_send(kMaxPayload));
    EXPECT_FALSE(link.channel.can_send(kMaxPayload + 1));
    link.send("two", 1);
    EXPECT_EQ(link.receive(), "one");
    EXPECT_EQ(link.receive(), "two");
    link.channel.pause();
    link.channel.close();
    link.channel.resume();  // a closed channel stays closed
    EXPECT_FALSE(link.channel.can_send(0));
}

TEST(EagerRdma, TooLargeOrInactiveCannotSend) {
    Link link;
    EXPECT_FALSE(link.channel.can_send(kMaxPayload + 1));
    EXPECT_TRUE(link.channel.can_send(kMaxPayload));
    EagerChannel inactive;
    EXPECT_FALSE(inactive.active());
    EXPECT_FALSE(inactive.can_send(0));
}

TEST(EagerRdma, UnclaimGivesTheSlotBack) {
    Link link;
    EagerFooter footer{};
    (void)link.channel.claim(4, 1, 0, &footer);
    link.channel.unclaim();
    link.send("abcd", 2);  // takes slot 0 with sequence 1 again
    EXPECT_EQ(link.receive(), "abcd");
}

EagerFooter *top_footer(Link &link) {
    return reinterpret_cast<EagerFooter *>(link.ring_memory + sizeof(link.ring_memory) - kEagerFooterSize);
}

TEST(EagerRdma, MalformedFooterStopsTheRing) {
    for (const auto &[length, marker_tag] : {std::pair<std::uint32_t, std::uint32_t>{100000, kEagerMarker | 1},
                                             std::pair<std::uint32_t, std::uint32_t>{4, 0x12345601}}) {
        Link link;
        EagerFooter *footer = top_footer(link);
        footer->length = length;
        footer->marker_tag = marker_tag;
        footer->seq = 1;
        EagerRing::Message m{};
        ASSERT_TRUE(link.ring.peek(m));
        EXPECT_FALSE(m.well_formed);
        EXPECT_EQ(m.length, 0u);
        link.ring.release(m);
        // Where the next message would end is unknowable: the ring is no longer read.
        EXPECT_TRUE(link.ring.broken());
        EXPECT_FALSE(link.ring.active());
        link.send("after", 1);
        EXPECT_FALSE(link.ring.peek(m));
    }
}

TEST(EagerRdma, StaleOrFutureSequenceIsNothingYet) {
    Link link;
    top_footer(link)->seq = 7;
    EagerRing::Message m{};
    EXPECT_FALSE(link.ring.peek(m));
}

EagerControl valid_grant() {
    EagerControl c{};
    c.magic_version = kEagerControlMagic;
    c.type = EagerControlType::Grant;
    c.rank = 3;
    c.rkey = 9;
    c.addr = 0x10000;
    c.slots = 16;
    c.slot_size = 4096;
    return c;
}

TEST(EagerRdma, ControlMessagesAreValidated) {
    EagerControl out{};
    EagerControl c = valid_grant();
    EXPECT_TRUE(decode_eager_control(&c, sizeof(c), out));
    EXPECT_EQ(out.slots, 16u);
    EXPECT_FALSE(decode_eager_control(&c, sizeof(c) - 1, out));
    EXPECT_FALSE(decode_eager_control(nullptr, sizeof(c), out));

    auto rejected = [](EagerControl bad) {
        EagerControl o{};
        return !decode_eager_control(&bad, sizeof(bad), o);
    };
    c = valid_grant(); c.magic_version ^= 1;                  EXPECT_TRUE(rejected(c));
    c = valid_grant(); c.type = static_cast<EagerControlType>(9); EXPECT_TRUE(rejected(c));
    c = valid_grant(); c.slots = 0;                           EXPECT_TRUE(rejected(c));
    c = valid_grant(); c.slots = kEagerMaxSlots + 1;          EXPECT_TRUE(rejected(c));
    c = valid_grant(); c.slot_size = 60;                      EXPECT_TRUE(rejected(c));
    c = valid_grant(); c.slot_size = 4100;                    EXPECT_TRUE(rejected(c));
    c = valid_grant(); c.slot_size = 4104;                    EXPECT_TRUE(rejected(c));  // not whole granules
    c = valid_grant(); c.slot_size = kEagerMaxSlotSize + 8;   EXPECT_TRUE(rejected(c));
    c = valid_grant(); c.addr = 0;                            EXPECT_TRUE(rejected(c));
    c = valid_grant(); c.addr = 0x10004;                      EXPECT_TRUE(rejected(c));
    c = valid_grant(); c.addr = 0x10008;                      EXPECT_TRUE(rejected(c));  // granule-aligned only
    c = valid_grant(); c.addr = ~std::uint64_t(0) - 64;       EXPECT_TRUE(rejected(c));

    c = valid_grant(); c.type = EagerControlType::Request; c.addr = 0; EXPECT_TRUE(rejected(c));
    c = valid_grant(); c.type = EagerControlType::Request;             EXPECT_FALSE(rejected(c));
    c = valid_grant(); c.type = EagerControlType::Refuse;              EXPECT_FALSE(rejected(c));
    c = valid_grant(); c.type = EagerControlType::Resume;              EXPECT_FALSE(rejected(c));
    c = valid_grant(); c.type = EagerControlType::Resumed;             EXPECT_FALSE(rejected(c));
    c = valid_grant(); c.type = static_cast<EagerControlType>(6);      EXPECT_TRUE(rejected(c));
}

TEST(EagerRdma, RandomControlBytesNeverPassUnchecked) {
    std::mt19937 rng(7);
    for (int i = 0; i < 20000; ++i) {
        EagerControl c = valid_grant();
        auto *bytes = reinterpret_cast<unsigned char *>(&c);
        bytes[rng() % sizeof(c)] ^= static_cast<unsigned char>(1u << (rng() % 8));
        EagerControl out{};
        if (decode_eager_control(&c, sizeof(c), out) && out.type == EagerControlType::Grant) {
            EXPECT_GE(out.slots, 1u);
            EXPECT_LE(out.slots, kEagerMaxSlots);
            EXPECT_EQ(out.slot_size % kEagerGranule, 0u);
            EXPECT_GE(out.slot_size, kEagerMinSlotSize);
            EXPECT_NE(out.addr, 0u);
        }
    }
}

}  // namespace
