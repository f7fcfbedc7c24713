// SPDX-License-Identifier: BSD-3-Clause
#include "port_health.h"

namespace xrc {

std::uint64_t retry_budget_us(std::uint8_t timeout, std::uint8_t retry_cnt) noexcept {
    if (timeout == 0) return 0;
    // 4.096 us * 2^timeout, in nanoseconds to keep the fraction: timeout is at most 31 (5 bits), so this fits.
    const std::uint64_t ack_timeout_ns = std::uint64_t{4096} << (timeout & 31u);
    return ack_timeout_ns * (std::uint64_t{retry_cnt} + 1) / 1000;
}

bool PortHealth::on_down(std::uint64_t now_us) noexcept {
    std::lock_guard<std::mutex> g(mutex_);
    if (down_) return false;
    down_ = true;
    down_since_us_ = now_us;
    ++downs_;
    return true;
}

bool PortHealth::on_up(std::uint64_t now_us, std::uint64_t *since_us) noexcept {
    std::lock_guard<std::mutex> g(mutex_);
    if (!down_) return false;
    if (since_us != nullptr) *since_us = down_since_us_;
    down_ = false;
    ++ups_;
    const std::uint64_t lasted = now_us - down_since_us_;
    if (lasted > longest_down_us_) longest_down_us_ = lasted;
    return true;
}

}  // namespace xrc
