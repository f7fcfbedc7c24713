// SPDX-License-Identifier: BSD-3-Clause
// The credit words a process hands out when it asks peers for eager RDMA rings: one 64-bit word per ring it may
// write into, where that ring's reader reports how far it has read. A word is taken when a ring is requested and
// given back only when the peer refuses; once granted, the peer may write into it at any time, so it is never
// reused.
#pragma once

#include <cstdint>
#include <memory>
#include <new>

namespace xrc {

class EagerCreditWords {
public:
    // `count` words, all free; the lowest index is taken first. False when out of memory (then none).
    bool init(std::uint32_t count) noexcept {
        clear();
        try {
            stack_ = std::make_unique<std::uint32_t[]>(count);
        } catch (const std::bad_alloc &) {
            return false;
        }
        for (std::uint32_t i = 0; i < count; ++i) stack_[i] = count - 1 - i;
        free_ = count;
        return true;
    }
    void clear() noexcept {
        stack_.reset();
        free_ = 0;
    }
    // False when every word is in use.
    bool take(std::uint32_t &index) noexcept {
        if (free_ == 0) return false;
        index = stack_[--free_];
        return true;
    }
    // `index` was taken and nobody reports into it.
    void give_back(std::uint32_t index) noexcept { stack_[free_++] = index; }
    std::uint32_t available() const noexcept { return free_; }

private:
    std::unique_ptr<std::uint32_t[]> stack_;  // the free indexes; the top is taken next
    std::uint32_t free_ = 0;
};

}  // namespace xrc
