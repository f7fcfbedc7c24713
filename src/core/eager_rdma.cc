// SPDX-License-Identifier: BSD-3-Clause
#include "eager_rdma.h"

#include <cstring>

namespace xrc {

void EagerRing::init(unsigned char *base, std::uint32_t slots, std::uint32_t slot_size) noexcept {
    base_ = base;
    geometry_ = EagerRingGeometry(slots, slot_size);
    report_every_ = geometry_.bytes() / 2 > 0 ? geometry_.bytes() / 2 : 1;
    position_ = 0;
    span_end_ = base + geometry_.bytes();
    expected_ = 1;
    reported_ = 0;
    broken_ = false;
}

void EagerChannel::activate(std::uint64_t remote_base, std::uint32_t rkey, std::uint32_t slots, std::uint32_t slot_size,
                            const std::uint64_t *consumed_word) noexcept {
    remote_base_ = remote_base;
    rkey_ = rkey;
    geometry_ = EagerRingGeometry(slots, slot_size);
    position_ = previous_position_ = 0;
    end_ = previous_end_ = geometry_.bytes();
    seq_ = 0;
    acked_ = 0;
    consumed_word_ = consumed_word;
    payload_limit_ = open_limit();
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
                c.slot_size < kEagerMinSlotSize || c.slot_size > kEagerMaxSlotSize ||
                (c.slot_size % kEagerGranule) != 0 || c.addr + std::uint64_t(c.slots) * c.slot_size < c.addr)
                return false;
            out = c;
            return true;
        case EagerControlType::Refuse:
        case EagerControlType::Resume:  // compared, never used as an address or a size
        case EagerControlType::Resumed:
            out = c;
            return true;
    }
    return false;
}

}  // namespace xrc
