// SPDX-License-Identifier: BSD-3-Clause
// When a process rewrites its status record (status_record.h). After a connection event the record is rewritten
// at the end of that progress call, so that it is current as soon as the event is; when nothing changes it is
// refreshed every `interval` (counters, and a sign of life), 0: never. Writing is paid for from a budget of CPU
// time: a burst to start with, then 1/kShare of the time that passes, so a process that opens thousands of
// connections (the record grows with them) spends at most that share of its time on its record: changes beyond
// the budget are written together once it allows. Plain arithmetic on the times the caller gives: no clock here.
#pragma once

#include <algorithm>
#include <cstdint>

namespace xrc {

class StatusSchedule {
public:
    static constexpr std::uint64_t kBurstNs = 20'000'000;  // 20 ms of writing before the share applies
    static constexpr std::uint64_t kShare = 100;             // then at most 1% of the time

    StatusSchedule(std::uint64_t interval_us, std::uint64_t now_us) noexcept
        : interval_us_(interval_us), last_us_(now_us), next_refresh_us_(now_us + interval_us) {}

    void changed() noexcept { changed_ = true; }
    bool pending() const noexcept { return changed_; }

    // Write now?
    bool due(std::uint64_t now_us) noexcept {
        refill(now_us);
        if (changed_) return budget_ns_ > 0;
        return interval_us_ != 0 && now_us >= next_refresh_us_;
    }
    // A write took `cost_ns` of CPU time.
    void wrote(std::uint64_t now_us, std::uint64_t cost_ns) noexcept {
        refill(now_us);
        changed_ = false;
        budget_ns_ -= static_cast<std::int64_t>(std::min<std::uint64_t>(cost_ns, kBurstNs));
        next_refresh_us_ = now_us + interval_us_;
    }

private:
    void refill(std::uint64_t now_us) noexcept {
        if (now_us <= last_us_) return;
        const std::uint64_t earned = std::min<std::uint64_t>((now_us - last_us_) * (1000 / kShare), 2 * kBurstNs);
        budget_ns_ = std::min<std::int64_t>(kBurstNs, budget_ns_ + static_cast<std::int64_t>(earned));
        last_us_ = now_us;
    }

    std::uint64_t interval_us_;
    std::uint64_t last_us_;
    std::uint64_t next_refresh_us_;
    std::int64_t budget_ns_ = static_cast<std::int64_t>(kBurstNs);
    bool changed_ = false;
};

}  // namespace xrc
