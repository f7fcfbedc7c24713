// Eager RDMA: a small ring of receive slots that one sender writes into with RDMA WRITE, and that the receiver
// polls in memory, for the few peers a process talks to most. It skips what a send costs the receiver (an SRQ
// buffer, a completion to poll, a repost), which is what small-message latency is made of. XRC exists to keep
// receive memory independent of the number of peers, so the rings are bounded: at most `rings` peers per process
// (btl_xrc_max_eager_rdma), each `slots * slot_size` bytes; everyone else uses the SRQs, as does every message
// that does not fit or finds no free slot.
//
// Wire format of a slot (slot_size bytes, a multiple of 8): the message is written flush against the end of the
// slot, followed by a 24-byte footer whose last 8 bytes (the sequence number) are the last bytes of the write.
// HCAs place a write in increasing address order, so a receiver that sees the expected sequence number sees the
// whole message:
//   [ ... unused ... | payload (length bytes) | pad to 8 | length:u32 | marker_tag:u32 | ack:u64 | seq:u64 ]
// seq counts the messages of the ring from 1; slot (seq - 1) % slots. A slot still holds the sequence number of
// its previous use (seq - slots), so nothing needs clearing.
//
// Flow control: the sender may have `slots` messages unconsumed. Every message also carries, in `ack`, how many
// messages its writer has consumed from the ring the reader writes into (if any), so traffic both ways needs no
// extra work; when half a ring was consumed without such a message going back, the receiver writes its count into
// a 64-bit word of the sender's memory (an RDMA WRITE). That write is kept rare on purpose: it occupies the send
// queue, and a reply posted right behind it waits for it.
//
// Set-up (control messages over the SRQ path): after `threshold` sends to a peer, the sender asks for a ring
// (Request: the address and rkey of its credit word); the receiver grants one (Grant: ring address, rkey, slots,
// slot size) or refuses (Refuse: it has none left). Everything a peer sends is validated before use.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xrc {

inline constexpr std::uint32_t kEagerFooterSize = 24;
inline constexpr std::uint32_t kEagerMinSlotSize = 64;
inline constexpr std::uint32_t kEagerMaxSlotSize = 65536;
inline constexpr std::uint32_t kEagerMaxSlots = 1024;

struct EagerFooter {
    std::uint32_t length;
    std::uint32_t marker_tag;  // kEagerMarker | BTL tag
    std::uint64_t ack;         // messages the writer consumed from the reader's writes (piggybacked credit)
    std::uint64_t seq;
};
static_assert(sizeof(EagerFooter) == kEagerFooterSize);

inline constexpr std::uint32_t kEagerMarker = 0x45520000u;  // "ER"
inline constexpr std::uint32_t eager_padded(std::uint32_t length) noexcept { return (length + 7u) & ~7u; }
// Bytes a message of `length` occupies at the end of a slot, footer included.
inline constexpr std::uint32_t eager_wire_size(std::uint32_t length) noexcept {
    return eager_padded(length) + kEagerFooterSize;
}
// Largest payload a slot of `slot_size` bytes carries.
inline constexpr std::uint32_t eager_max_payload(std::uint32_t slot_size) noexcept {
    return slot_size - kEagerFooterSize;
}

// The receiving end: polls the slots one peer writes into.
class EagerRing {
public:
    struct Message {
        const unsigned char *data;
        std::uint32_t length;
        std::uint8_t tag;
        bool well_formed;  // false: hand nothing to anyone, just release the slot
        std::uint64_t ack;
    };

    EagerRing() = default;
    // `base`: slots * slot_size bytes, 8-byte aligned, zeroed (a zero sequence number never matches).
    void init(unsigned char *base, std::uint32_t slots, std::uint32_t slot_size) noexcept;
    bool active() const noexcept { return base_ != nullptr; }

    // True when the next message has arrived; fills `out` (not consumed until release()).
    bool peek(Message &out) const noexcept {
        unsigned char *slot_end = base_ + (consumed_ % slots_) * slot_size_ + slot_size_;
        const auto *footer = reinterpret_cast<const EagerFooter *>(slot_end - kEagerFooterSize);
        if (__atomic_load_n(&footer->seq, __ATOMIC_ACQUIRE) != consumed_ + 1)
            return false;
        const std::uint32_t length = footer->length, marker_tag = footer->marker_tag;
        out.well_formed = length <= eager_max_payload(slot_size_) && (marker_tag & 0xffffff00u) == kEagerMarker;
        out.length = out.well_formed ? length : 0;
        out.tag = static_cast<std::uint8_t>(marker_tag & 0xffu);
        out.ack = footer->ack;
        out.data = slot_end - kEagerFooterSize - eager_padded(out.length);
        return true;
    }
    // The message peek() returned was handled: its slot may be reused once reported.
    void release() noexcept { ++consumed_; }

    std::uint64_t consumed() const noexcept { return consumed_; }
    // A credit report is worth an RDMA WRITE once half the ring was consumed since the last one.
    bool report_due() const noexcept { return consumed_ - reported_ >= report_every_; }
    void reported(std::uint64_t value) noexcept { reported_ = value; }

    std::uint32_t slots() const noexcept { return slots_; }
    std::uint32_t slot_size() const noexcept { return slot_size_; }
    unsigned char *base() const noexcept { return base_; }

private:
    unsigned char *base_ = nullptr;
    std::uint32_t slots_ = 0;
    std::uint32_t slot_size_ = 0;
    std::uint32_t report_every_ = 1;
    std::uint64_t consumed_ = 0;
    std::uint64_t reported_ = 0;
};

// The sending end: which slot of the peer's ring comes next, and whether one is free.
class EagerChannel {
public:
    EagerChannel() = default;
    // `consumed_word`: our registered 64-bit word the receiver writes its consumed count into (zeroed).
    void activate(std::uint64_t remote_base, std::uint32_t rkey, std::uint32_t slots, std::uint32_t slot_size,
                  const std::uint64_t *consumed_word) noexcept;
    bool active() const noexcept { return consumed_word_ != nullptr; }

    // True when a message of `length` bytes fits a slot and a slot is free.
    bool can_send(std::uint32_t length) const noexcept {
        if (length > max_payload_) return false;
        if (sent_ - acked_ < slots_) return true;
        const std::uint64_t reported = __atomic_load_n(consumed_word_, __ATOMIC_ACQUIRE);
        return reported <= sent_ && sent_ - reported < slots_;
    }
    // A count of consumed messages the peer piggybacked on a message to us; values beyond what was sent are
    // ignored.
    void note_ack(std::uint64_t consumed) noexcept {
        if (consumed > acked_ && consumed <= sent_) acked_ = consumed;
    }
    // Takes the next slot (can_send() must have said yes): writes the footer (with `ack`, our count of the peer's
    // messages consumed) at `footer`, the bytes right after the padded payload in the caller's buffer, and returns
    // the remote address where the eager_wire_size(length) bytes go.
    std::uint64_t claim(std::uint32_t length, std::uint8_t tag, std::uint64_t ack, EagerFooter *footer) noexcept;
    // Gives back the slot claim() just took (the post failed before anything was written).
    void unclaim() noexcept { --sent_; }

    std::uint32_t rkey() const noexcept { return rkey_; }
    std::uint32_t max_payload() const noexcept { return max_payload_; }

private:
    std::uint64_t remote_base_ = 0;
    std::uint32_t rkey_ = 0;
    std::uint32_t slots_ = 0;
    std::uint32_t slot_size_ = 0;
    std::uint32_t max_payload_ = 0;  // 0 while inactive: can_send() is false for every length but 0
    std::uint64_t sent_ = 0;
    std::uint64_t acked_ = 0;  // consumed count piggybacked on the peer's messages
    const std::uint64_t *consumed_word_ = nullptr;
};

// Set-up messages, sent over the SRQ path.
enum class EagerControlType : std::uint32_t { Request = 1, Grant = 2, Refuse = 3 };

struct EagerControl {
    std::uint32_t magic_version;  // kEagerControlMagic
    EagerControlType type;
    std::uint32_t rank;  // the sender of this message
    std::uint32_t rkey;
    std::uint64_t addr;  // Request: the credit word; Grant: the ring
    std::uint32_t slots;
    std::uint32_t slot_size;
};
static_assert(sizeof(EagerControl) == 32);
inline constexpr std::uint32_t kEagerControlMagic = 0x58454301u;  // "XEC" version 1

// Validates a received control message; false (with `out` untouched) for anything malformed.
bool decode_eager_control(const void *data, std::size_t length, EagerControl &out) noexcept;

}  // namespace xrc
