// SPDX-License-Identifier: BSD-3-Clause
// The simulator's clock: a binary heap of (time, sequence) keys over a pool of event records reused through a free
// list. The sequence number makes the order of simultaneous events (and so the whole run) deterministic.
#pragma once

#include <cstdint>
#include <queue>
#include <vector>

namespace sim {

template <class Record>
class EventQueue {
public:
    // Schedules `record` at `time_ns`.
    void push(std::uint64_t time_ns, const Record &record) {
        std::uint32_t slot;
        if (!free_.empty()) {
            slot = free_.back();
            free_.pop_back();
            pool_[slot] = record;
        } else {
            slot = static_cast<std::uint32_t>(pool_.size());
            pool_.push_back(record);
        }
        heap_.push(Key{time_ns, seq_++, slot});
        peak_ = std::max<std::size_t>(peak_, heap_.size());
    }
    bool empty() const noexcept { return heap_.empty(); }
    std::uint64_t next_time() const noexcept { return heap_.top().time; }
    // Removes the earliest event into `out`; returns its time.
    std::uint64_t pop(Record &out) {
        const Key k = heap_.top();
        heap_.pop();
        out = pool_[k.slot];
        free_.push_back(k.slot);
        return k.time;
    }
    std::size_t size() const noexcept { return heap_.size(); }
    std::size_t peak() const noexcept { return peak_; }
    std::uint64_t scheduled() const noexcept { return seq_; }

private:
    struct Key {
        std::uint64_t time;
        std::uint64_t seq;
        std::uint32_t slot;
        bool operator>(const Key &o) const noexcept { return time != o.time ? time > o.time : seq > o.seq; }
    };
    std::priority_queue<Key, std::vector<Key>, std::greater<Key>> heap_;
    std::vector<Record> pool_;
    std::vector<std::uint32_t> free_;
    std::uint64_t seq_ = 0;
    std::size_t peak_ = 0;
};

}  // namespace sim
