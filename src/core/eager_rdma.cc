#include "eager_rdma.h"

#include <cstring>

namespace xrc {

void EagerRing::init(unsigned char *base, std::uint32_t slots, std::uint32_t slot_size) noexcept {
    base_ = base;
    slots_ = slots;
    slot_size_ = slot_size;
    report_every_ = slots / 2 > 0 ? slots / 2 : 1;
    consumed_ = 0;
    reported_ = 0;
}

void EagerChannel::activate(std::uint64_t remote_base, std::uint32_t rkey, std::uint32_t slots,
                            std::uint32_t slot_size, const std::uint64_t *consumed_word) noexcept {
    remote_base_ = remote_base;
    rkey_ = rkey;
    slots_ = slots;
    slot_size_ = slot_size;
    max_payload_ = eager_max_payload(slot_size);
    sent_ = 0;
    acked_ = 0;
    consumed_word_ = consumed_word;
}

std::uint64_t EagerChannel::claim(std::uint32_t length, std::uint8_t tag, std::uint64_t ack,
                                  EagerFooter *footer) noexcept {
    const std::uint64_t seq = ++sent_;
    footer->length = length;
    footer->marker_tag = kEagerMarker | tag;
    footer->ack = ack;
    footer->seq = seq;
    const std::uint64_t slot_end = remote_base_ + ((seq - 1) % slots_) * slot_size_ + slot_size_;
    return slot_end - eager_wire_size(length);
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
        if (c.addr == 0 || (c.addr % 8) != 0 || c.slots < 1 || c.slots > kEagerMaxSlots ||
            c.slot_size < kEagerMinSlotSize || c.slot_size > kEagerMaxSlotSize || (c.slot_size % 8) != 0 ||
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
