// SPDX-License-Identifier: BSD-3-Clause
// The daemon's one clock: CLOCK_MONOTONIC in nanoseconds (retry and ACK timers, the delay line).
#pragma once
#include <cstdint>
#include <time.h>

namespace simhca {

inline uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace simhca
