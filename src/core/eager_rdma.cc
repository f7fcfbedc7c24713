// SPDX-License-Identifier: BSD-3-Clause
#include "eager_rdma.h"

#include <cstring>

namespace xrc {

void EagerRing::init(unsigned char *base, std::uint32_t slots, std::uint32_t slot_size) noexcept {
    base_ = base;
    geometry_ = EagerRingGeometry(slots, slot_size);
    report_every_ = geometry_.bytes() / 2 > 0 ? geometry_.bytes() / 2 : 1;
    position_ = 0;
    seq_ = 0;
    reported_ = 0;
    broken_ = false;
}

void EagerRing::release(const Message &message) noexcept {
    if (!message.well_formed) {
        broken_ = true;  // the length is nonsense: nobody knows where the next message ends
        return;
    }
    // Zero the last word of every granule of the span: any of them may be a future footer's sequence number,
    // and payload bytes could hold any value. The data was handed on already. The span ends where peek() found
    // the footer, right behind the padded payload.
    const std::uint32_t span = eager_span(message.length);
    unsigned char *span_end =
        const_cast<unsigned char *>(message.data) + eager_padded(message.length) + kEagerFooterSize;
    for (std::uint32_t off = kEagerGranule; off <= span; off += kEagerGranule)
        __atomic_store_n(reinterpret_cast<std::uint64_t *>(span_end - off + kEagerGranule - 8), 0, __ATOMIC_RELAXED);
    position_ = geometry_.advance(position_, span);
    ++seq_;
}

void EagerChannel::activate(std::uint64_t remote_base, std::uint32_t rkey, std::uint32_t slots,
                            std::uint32_t slot_size, const std::uint64_t *consumed_word) noexcept {
    remote_base_ = remote_base;
    rkey_ = rkey;
    geometry_ = EagerRingGeometry(slots, slot_size);
    max_payload_ = eager_max_payload(slot_size);
    position_ = previous_position_ = 0;
    seq_ = 0;
    acked_ = 0;
    consumed_word_ = consumed_word;
}

std::uint64_t EagerChannel::claim(std::uint32_t length, std::uint8_t tag, std::uint64_t ack,
                                  EagerFooter *footer) noexcept {
    footer->length = length;
    footer->marker_tag = kEagerMarker | tag;
    footer->ack = ack;
    footer->seq = ++seq_;
    const std::uint64_t span_end = remote_base_ + geometry_.end_offset(position_);
    previous_position_ = position_;
    position_ = geometry_.advance(position_, eager_span(length));
    return span_end - eager_wire_size(length);
}

bool decode_eager_control(const void *data, std::size_t length, EagerControl &out) noexcept {
    if (data == nullptr || length < sizeof(EagerControl)) return false;
    EagerControl c;
    std::memcpy(&c, data, sizeof(c));
    if (c.magic_version != kEagerControlMagic) return false;
    switch (c.type) {
    case EagerControlType::Request:
        return c.addr != 0 && (c.addr % 8) == 0 ? (out = c, true) : false;
    case EagerControlType::Grant:
        if (c.addr == 0 || (c.addr % kEagerGranule) != 0 || c.slots < 1 || c.slots > kEagerMaxSlots ||
            c.slot_size < kEagerMinSlotSize || c.slot_size > kEagerMaxSlotSize || (c.slot_size % kEagerGranule) != 0 ||
            c.addr + std::uint64_t(c.slots) * c.slot_size < c.addr)
            return false;
        out = c;
        return true;
    case EagerControlType::Refuse:
        out = c;
        return true;
    }
    return false;
}

}  // namespace xrc
