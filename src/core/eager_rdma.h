// SPDX-License-Identifier: BSD-3-Clause
// Eager RDMA: a ring of receive memory that one sender writes into with RDMA WRITE, and that the receiver polls
// in memory, for the few peers a process talks to most. It skips what a send costs the receiver (an SRQ buffer, a
// completion to poll, a repost), which is what small-message latency and message rate are made of. XRC exists to
// keep receive memory independent of the number of peers, so the rings are bounded: at most `rings` peers per
// process (btl_xrc_max_eager_rdma), each `slots * slot_size` bytes; everyone else uses the SRQs, as does every
// message that does not fit or finds no room.
//
// Layout: the ring is filled from its top (highest address) downward. A message takes the fewest 64-byte granules
// that hold it and its footer (a "span"); the largest span is slot_size, so a ring holds `slots` of the largest
// messages and many more small ones (a 1-byte MPI message takes one granule). The message is written flush
// against the end of its span, followed by a 24-byte footer whose last 8 bytes (the sequence number) are the last
// bytes of the write:
//   [ ... | payload (length bytes) | pad to 8 | length:u32 | marker_tag:u32 | ack:u64 | seq:u64 ]  <- span end
// The receiver always knows where the next message ends (where the previous span began), so it polls one word.
// HCAs place a write in increasing address order, so a receiver that sees the expected sequence number sees the
// whole message. When less than slot_size is left below a span, the next span starts at the top again; both
// ends apply that rule, so it needs no marker.
//
// Growing downward keeps the footer, which carries the length, where the receiver looks. Sequence numbers count
// messages from 1, so a word that once held an older footer never matches; but a word that held payload might
// hold any value, so the receiver zeroes every candidate footer position (the last word of each granule) of a
// span it releases. The ring starts zeroed.
//
// Flow control, in bytes of ring position (a counter that grows by each span and each skip to the top): the
// sender may have `ring bytes` unconsumed. Every message also carries, in `ack`, the position its writer has
// consumed up to in the ring the reader writes into (if any), so traffic both ways needs no extra work; when half
// a ring was consumed without such a message going back, the receiver writes its position into a 64-bit word of
// the sender's memory (an RDMA WRITE). That write is kept rare on purpose: it occupies the send queue, and a
// reply posted right behind it waits for it.
//
// Set-up (control messages over the SRQ path): after `threshold` sends to a peer, the sender asks for a ring
// (Request: the address and rkey of its credit word); the receiver grants one (Grant: ring address, rkey, slots,
// slot size) or refuses (Refuse: it has none left). Everything a peer sends is validated before use; a footer
// whose length makes no sense stops the ring (the receiver cannot know where the next message would be).
#pragma once

#include "wire_format.h"

#include <cstddef>
#include <cstdint>

namespace xrc {

inline constexpr std::uint32_t kEagerMinSlotSize = 64;
inline constexpr std::uint32_t kEagerMaxSlotSize = 65536;
inline constexpr std::uint32_t kEagerMaxSlots = 1024;

inline constexpr std::uint32_t eager_padded(std::uint32_t length) noexcept {
    return (length + 7u) & ~7u;
}
// Bytes a message of `length` occupies at the end of a slot, footer included.
inline constexpr std::uint32_t eager_wire_size(std::uint32_t length) noexcept {
    return eager_padded(length) + kEagerFooterSize;
}
// Largest payload a slot of `slot_size` bytes carries.
inline constexpr std::uint32_t eager_max_payload(std::uint32_t slot_size) noexcept {
    return slot_size - kEagerFooterSize;
}

inline constexpr std::uint32_t kEagerGranule = 64;
// Ring bytes a message of `length` takes: its wire size rounded up to whole granules.
inline constexpr std::uint32_t eager_span(std::uint32_t length) noexcept {
    return (eager_wire_size(length) + kEagerGranule - 1) & ~(kEagerGranule - 1);
}

// Where a ring position lies, and the position after a span: shared by both ends so they agree on every skip.
class EagerRingGeometry {
public:
    EagerRingGeometry() = default;
    EagerRingGeometry(std::uint32_t slots, std::uint32_t slot_size) noexcept
        : bytes_(std::uint64_t(slots) * slot_size), max_span_(slot_size) {}
    std::uint64_t bytes() const noexcept { return bytes_; }
    std::uint32_t max_span() const noexcept { return max_span_; }
    // The position after a span of `span` bytes (at most max_span()) at `position`: skips to the next top when less
    // than the largest span would be left below. `end` is where the span at `position` ends, as an offset from the
    // ring's base (bytes() - position % bytes()), and becomes the result's: both ends keep it next to their
    // position, so a message costs no division.
    std::uint64_t advance(std::uint64_t position, std::uint32_t span, std::uint64_t &end) const noexcept {
        std::uint64_t next = position + span;
        std::uint64_t left = end - span;  // at least max_span was left below every position, so the span fits
        if (left < max_span_) {
            next += left;
            left = bytes_;
        }
        end = left;
        return next;
    }

private:
    std::uint64_t bytes_ = 0;
    std::uint32_t max_span_ = 0;
};

// The receiving end: polls the ring one peer writes into.
class EagerRing {
public:
    struct Message {
        const unsigned char *data;
        std::uint32_t length;
        std::uint8_t tag;
        bool well_formed;  // false: the ring is corrupt; hand nothing to anyone and stop polling it
        std::uint64_t ack;
    };

    EagerRing() = default;
    // `base`: slots * slot_size bytes, 64-byte aligned, zeroed (a zero sequence number never matches); slot_size
    // a multiple of kEagerGranule.
    void init(unsigned char *base, std::uint32_t slots, std::uint32_t slot_size) noexcept;
    bool active() const noexcept { return base_ != nullptr && !broken_; }

    // True when the next message has arrived; fills `out` (not consumed until release()). A broken ring polls a
    // footer that never matches (see release()), so this is its only test: it runs once more per call than
    // messages arrive.
    bool peek(Message &out) const noexcept {
        unsigned char *span_end = span_end_;
        const auto *footer = reinterpret_cast<const EagerFooter *>(span_end - kEagerFooterSize);
        if (__atomic_load_n(&footer->seq, __ATOMIC_ACQUIRE) != expected_) return false;
        const std::uint32_t length = footer->length, marker_tag = footer->marker_tag;
        out.well_formed =
            length <= eager_max_payload(geometry_.max_span()) && (marker_tag & 0xffffff00u) == kEagerMarker;
        out.length = out.well_formed ? length : 0;
        out.tag = static_cast<std::uint8_t>(marker_tag & 0xffu);
        out.ack = footer->ack;
        out.data = span_end - kEagerFooterSize - eager_padded(out.length);
        return true;
    }
    // The message peek() returned was handled: its span is cleared for reuse, to be reported. A malformed
    // message stops the ring instead.
    [[gnu::always_inline]] void release(const Message &message) noexcept {
        if (!message.well_formed) {
            // The length is nonsense: nobody knows where the next message ends. From now on peek() reads a footer
            // whose sequence number is 0, which no expected number is.
            broken_ = true;
            span_end_ = never_end();
            return;
        }
        // Zero the last word of every granule of the span: any of them may be a future footer's sequence number,
        // and payload bytes could hold any value. The data was handed on already. A span has one granule at least.
        unsigned char *const span_end = span_end_;
        const std::uint32_t span = eager_span(message.length);
        unsigned char *const span_start = span_end - span;
        unsigned char *granule_end = span_end;
        do {
            __atomic_store_n(reinterpret_cast<std::uint64_t *>(granule_end - 8), 0, __ATOMIC_RELAXED);
            granule_end -= kEagerGranule;
        } while (granule_end != span_start);
        auto end = static_cast<std::uint64_t>(span_end - base_);
        position_ = geometry_.advance(position_, span, end);
        span_end_ = base_ + end;
        ++expected_;
    }

    // The next message, of `length` bytes, was delivered from a copy its writer sent through the SRQs after its
    // connection timed out or broke: its span is passed over as if read (its write never landed, or it did and is now
    // cleared), so that the ring stands where its writer will write next. Not for a broken ring.
    void skip(std::uint32_t length) noexcept { release(Message{nullptr, length, 0, true, 0}); }

    std::uint64_t consumed() const noexcept { return position_; }
    std::uint64_t messages() const noexcept { return expected_ - 1; }  // taken off the ring so far
    bool broken() const noexcept { return broken_; }
    // A credit report is worth an RDMA WRITE once half the ring was consumed since the last one.
    bool report_due() const noexcept { return position_ - reported_ >= report_every_; }
    void reported(std::uint64_t value) noexcept { reported_ = value; }

private:
    // What a broken ring polls: sequence number 0 never matches.
    static constexpr EagerFooter kNeverFooter{};
    static unsigned char *never_end() noexcept {
        return const_cast<unsigned char *>(reinterpret_cast<const unsigned char *>(&kNeverFooter + 1));
    }

    unsigned char *base_ = nullptr;
    EagerRingGeometry geometry_;
    std::uint64_t report_every_ = 1;
    std::uint64_t position_ = 0;             // consumed up to here
    unsigned char *span_end_ = never_end();  // where the span at position_ ends, its footer right below
    std::uint64_t expected_ = 1;             // the next message's sequence number: messages consumed + 1
    std::uint64_t reported_ = 0;
    bool broken_ = false;
};

// The sending end: where the next message goes in the peer's ring, and whether there is room.
class EagerChannel {
public:
    EagerChannel() = default;
    // `consumed_word`: our registered 64-bit word the receiver writes its consumed position into (zeroed).
    void activate(std::uint64_t remote_base, std::uint32_t rkey, std::uint32_t slots, std::uint32_t slot_size,
                  const std::uint64_t *consumed_word) noexcept;
    bool active() const noexcept { return consumed_word_ != nullptr; }
    // No message goes into the ring any more (can_send() says no from now on).
    void close() noexcept {
        consumed_word_ = nullptr;
        payload_limit_ = 0;
    }
    // No message goes into the ring until resume(); where the next one goes, and the credit, stay as they are.
    void pause() noexcept { payload_limit_ = 0; }
    void resume() noexcept { payload_limit_ = open_limit(); }
    // Where the next message goes (ring bytes written so far) and how many were written.
    std::uint64_t position() const noexcept { return position_; }
    std::uint64_t written() const noexcept { return seq_; }

    // True when a message of `length` bytes fits a span and the ring has room for it.
    bool can_send(std::uint32_t length) const noexcept {
        if (length >= payload_limit_) return false;  // too large, or the channel is not active
        const std::uint64_t needed = position_ + eager_span(length);
        if (needed - acked_ <= geometry_.bytes()) return true;
        const std::uint64_t reported = __atomic_load_n(consumed_word_, __ATOMIC_ACQUIRE);
        return reported <= position_ && reported > acked_ && needed - reported <= geometry_.bytes();
    }
    // A consumed position the peer piggybacked on a message to us; values beyond what was sent are ignored.
    void note_ack(std::uint64_t consumed) noexcept {
        if (consumed > acked_ && consumed <= position_) acked_ = consumed;
    }
    // Takes the next span (can_send() must have said yes): writes the footer (with `ack`, our consumed position in
    // the peer's messages) at `footer`, the bytes right after the padded payload in the caller's buffer, and
    // returns the remote address where the eager_wire_size(length) bytes go.
    [[gnu::always_inline]] std::uint64_t claim(std::uint32_t length, std::uint8_t tag, std::uint64_t ack,
                                               EagerFooter *footer) noexcept {
        footer->length = length;
        footer->marker_tag = kEagerMarker | tag;
        footer->ack = ack;
        footer->seq = ++seq_;
        const std::uint64_t span_end = remote_base_ + end_;
        previous_position_ = position_;
        previous_end_ = end_;
        position_ = geometry_.advance(position_, eager_span(length), end_);
        return span_end - eager_wire_size(length);
    }
    // Gives back the span claim() just took (the post failed before anything was written).
    void unclaim() noexcept {
        position_ = previous_position_;
        end_ = previous_end_;
        --seq_;
    }

    std::uint32_t rkey() const noexcept { return rkey_; }

private:
    // The payload limit of an active channel: the largest payload + 1 (0 once closed).
    std::uint32_t open_limit() const noexcept {
        return consumed_word_ != nullptr ? eager_max_payload(geometry_.max_span()) + 1 : 0;
    }

    std::uint64_t remote_base_ = 0;
    std::uint32_t rkey_ = 0;
    EagerRingGeometry geometry_;
    std::uint32_t payload_limit_ = 0;  // open_limit() while active and not paused, else 0: one test for both
    std::uint64_t position_ = 0;       // ring position of the next span
    std::uint64_t end_ = 0;            // where that span ends: its offset from the ring's base
    std::uint64_t previous_position_ = 0, previous_end_ = 0;
    std::uint64_t seq_ = 0;    // messages sent
    std::uint64_t acked_ = 0;  // consumed position piggybacked on the peer's messages
    const std::uint64_t *consumed_word_ = nullptr;
};

// Validates a received control message; false (with `out` untouched) for anything malformed.
bool decode_eager_control(const void *data, std::size_t length, EagerControl &out) noexcept;

}  // namespace xrc
