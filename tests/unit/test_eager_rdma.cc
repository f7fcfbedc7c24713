// Eager RDMA rings: a sender (EagerChannel) and a receiver (EagerRing) connected by a simulated RDMA WRITE
// (a memcpy to where claim() says), checking data, slot reuse, flow control, malformed footers and the
// validation of control messages.
#include "src/core/eager_rdma.h"

#include <gtest/gtest.h>

#include <cstring>
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
        ring.release();
        return s;
    }

    void report() {
        consumed_word = ring.consumed();
        ring.reported(ring.consumed());
    }
};

TEST(EagerRdma, WireSizeKeepsTheFooterAligned) {
    EXPECT_EQ(eager_wire_size(0), 24u);
    EXPECT_EQ(eager_wire_size(1), 32u);
    EXPECT_EQ(eager_wire_size(8), 32u);
    EXPECT_EQ(eager_wire_size(9), 40u);
    EXPECT_EQ(eager_max_payload(4096), 4072u);
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
        link.ring.release();
        link.report();
    }
}

TEST(EagerRdma, FlowControlStopsAtTheRingSizeUntilReported) {
    Link link;
    for (std::uint32_t i = 0; i < Link::kSlots; ++i) link.send("m" + std::to_string(i), 1);
    EXPECT_FALSE(link.channel.can_send(1));  // every slot unconsumed
    EXPECT_EQ(link.receive(), "m0");
    EXPECT_EQ(link.receive(), "m1");
    EXPECT_FALSE(link.channel.can_send(1));  // consumed but not reported yet
    EXPECT_TRUE(link.ring.report_due());     // half the ring
    link.report();
    EXPECT_FALSE(link.ring.report_due());
    EXPECT_TRUE(link.channel.can_send(1));
    link.send("m4", 1);  // reuses slot 0: its old sequence number must not match any more
    link.send("m5", 1);
    EXPECT_FALSE(link.channel.can_send(1));
    EXPECT_EQ(link.receive(), "m2");
    EXPECT_EQ(link.receive(), "m3");
    EXPECT_EQ(link.receive(), "m4");
    EXPECT_EQ(link.receive(), "m5");
    EXPECT_EQ(link.receive(), "<none>");
}

TEST(EagerRdma, PiggybackedAcksReturnCreditWithoutAReport) {
    Link link;
    for (std::uint32_t i = 0; i < Link::kSlots; ++i) link.send("m" + std::to_string(i), 1, 1000 + i);
    EXPECT_FALSE(link.channel.can_send(1));
    EagerRing::Message m{};
    ASSERT_TRUE(link.ring.peek(m));
    EXPECT_EQ(m.ack, 1000u);  // the footer carries the writer's count through
    link.receive();
    link.receive();
    // The reader answers with a message of its own that carries "2 consumed": the channel learns it from there.
    link.channel.note_ack(2);
    EXPECT_TRUE(link.channel.can_send(1));
    link.send("m4", 1);
    link.send("m5", 1);
    EXPECT_FALSE(link.channel.can_send(1));
    link.channel.note_ack(1);      // older than what it knows: no effect
    link.channel.note_ack(99999);  // beyond what was sent: ignored
    EXPECT_FALSE(link.channel.can_send(1));
    // A report in the credit word beyond what was sent is ignored too.
    link.consumed_word = 99999;
    EXPECT_FALSE(link.channel.can_send(1));
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

TEST(EagerRdma, TooLargeOrInactiveCannotSend) {
    Link link;
    EXPECT_FALSE(link.channel.can_send(eager_max_payload(Link::kSlotSize) + 1));
    EXPECT_TRUE(link.channel.can_send(eager_max_payload(Link::kSlotSize)));
    EagerChannel inactive;
    EXPECT_FALSE(inactive.active());
}

TEST(EagerRdma, UnclaimGivesTheSlotBack) {
    Link link;
    EagerFooter footer{};
    (void)link.channel.claim(4, 1, 0, &footer);
    link.channel.unclaim();
    link.send("abcd", 2);  // takes slot 0 with sequence 1 again
    EXPECT_EQ(link.receive(), "abcd");
}

TEST(EagerRdma, MalformedFooterIsReleasedNotDelivered) {
    Link link;
    // A footer with the right sequence number but a length beyond the slot, and one with a foreign marker.
    auto *footer = reinterpret_cast<EagerFooter *>(link.ring_memory + Link::kSlotSize - kEagerFooterSize);
    footer->length = 100000;
    footer->marker_tag = kEagerMarker | 1;
    footer->seq = 1;
    EagerRing::Message m{};
    ASSERT_TRUE(link.ring.peek(m));
    EXPECT_FALSE(m.well_formed);
    EXPECT_EQ(m.length, 0u);
    link.ring.release();
    footer = reinterpret_cast<EagerFooter *>(link.ring_memory + 2 * Link::kSlotSize - kEagerFooterSize);
    footer->length = 4;
    footer->marker_tag = 0x12345601;
    footer->seq = 2;
    ASSERT_TRUE(link.ring.peek(m));
    EXPECT_FALSE(m.well_formed);
    link.ring.release();
    // A stale or future sequence number is "nothing yet".
    footer = reinterpret_cast<EagerFooter *>(link.ring_memory + 3 * Link::kSlotSize - kEagerFooterSize);
    footer->seq = 7;
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
    c = valid_grant(); c.slot_size = kEagerMaxSlotSize + 8;   EXPECT_TRUE(rejected(c));
    c = valid_grant(); c.addr = 0;                            EXPECT_TRUE(rejected(c));
    c = valid_grant(); c.addr = 0x10004;                      EXPECT_TRUE(rejected(c));
    c = valid_grant(); c.addr = ~std::uint64_t(0) - 64;       EXPECT_TRUE(rejected(c));

    c = valid_grant(); c.type = EagerControlType::Request; c.addr = 0; EXPECT_TRUE(rejected(c));
    c = valid_grant(); c.type = EagerControlType::Request;             EXPECT_FALSE(rejected(c));
    c = valid_grant(); c.type = EagerControlType::Refuse;              EXPECT_FALSE(rejected(c));
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
            EXPECT_EQ(out.slot_size % 8, 0u);
            EXPECT_GE(out.slot_size, kEagerMinSlotSize);
            EXPECT_NE(out.addr, 0u);
        }
    }
}

}  // namespace
