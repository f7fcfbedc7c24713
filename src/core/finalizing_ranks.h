// SPDX-License-Identifier: BSD-3-Clause
// The ranks of this process's job known to be in their BTL finalize: one said so on some rail (it refused a
// connection as finalizing, or told us LEAVING). Their upper layers are gone (Open MPI finalizes a BTL after ob1
// and osc have closed), so whatever reaches them is dropped there: a send toward one of them that cannot be
// delivered any more is not lost work. Shared by the home connection managers of every rail of the process, so
// that what one rail learned decides on another (a process finalizes its rails one set at a time, and a rail whose
// manager is gone answers nothing). Grows by one entry per rank that leaves: O(P*N) at most, once each.
//
// Threads: any; every call takes the set's own mutex, a leaf (held only inside these calls).
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_set>

namespace xrc {

class FinalizingRanks {
public:
    void add(std::uint32_t rank) noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        try {
            ranks_.insert(rank);
        } catch (...) {  // out of memory: not remembered; its undeliverable sends count as lost, as before
        }
    }
    bool contains(std::uint32_t rank) const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return ranks_.count(rank) != 0;
    }

private:
    mutable std::mutex mutex_;
    std::unordered_set<std::uint32_t> ranks_;
};

}  // namespace xrc
