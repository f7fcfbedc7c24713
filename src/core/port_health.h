// SPDX-License-Identifier: BSD-3-Clause
// Whether a port can carry traffic now, and how long it may stay down before the job is given up. A port that
// goes down (the link flaps, a cable is reseated, the subnet manager re-sweeps) leaves its RC/XRC QPs in RTS: the
// HCA retransmits what is in flight until the retry budget is spent, and only then does a work request fail. So a
// down port is not an error by itself: new posts are held (they queue, as on a link still being connected), and
// the job ends only when a work request really fails or the port stays down longer than the grace period.
//
// State and arithmetic (no verbs calls, no clock of its own): the caller passes the time. Every progressing thread
// may ask and report at once (events are acted on by whichever thread progresses): each member is one step under
// the object's own mutex, a leaf lock, so that exactly one of two threads that see the port go down (or up) is told
// it changed. What the caller does on a change (holding or resuming the sends) it serializes itself.
#pragma once

#include <cstdint>
#include <mutex>

namespace xrc {

// How long the HCA keeps retransmitting a request nobody acknowledges before it fails it with RETRY_EXC_ERR:
// (retry_cnt + 1) local ACK timeouts of 4.096 us * 2^timeout. 0 for timeout 0 (the IB spec's "infinite": the
// requester never times out).
std::uint64_t retry_budget_us(std::uint8_t timeout, std::uint8_t retry_cnt) noexcept;

// How long a port may stay down before the job ends with it where outages past the retry budget are ridden through
// (outage_limit_us != 0: the BTL decided it applies): its grace or, when longer, their limit, since the connection
// manager reconnects that long. 0 stays 0 (forever).
constexpr std::uint64_t effective_port_grace_us(std::uint64_t grace_us, std::uint64_t outage_limit_us) noexcept {
    return grace_us != 0 && outage_limit_us > grace_us ? outage_limit_us : grace_us;
}

class PortHealth {
public:
    // `grace_us`: how long the port may stay down before grace_expired() (0: forever): then its rail is given up
    // where another rail carries its traffic. `outage_limit_us`: where outages are ridden through, how long the
    // last rail may stay down before outage_expired() (effective_port_grace_us).
    explicit PortHealth(std::uint64_t grace_us = 0, std::uint64_t outage_limit_us = 0) noexcept
        : grace_us_(grace_us), hold_limit_us_(effective_port_grace_us(grace_us, outage_limit_us)) {}
    PortHealth(const PortHealth &) = delete;
    PortHealth &operator=(const PortHealth &) = delete;

    bool down() const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return down_;
    }
    std::uint64_t down_since_us() const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return down_since_us_;
    }
    std::uint64_t grace_us() const noexcept { return grace_us_; }  // fixed at construction
    // How long the port may stay down at all (its grace, or the outage limit when longer); fixed at construction.
    std::uint64_t hold_limit_us() const noexcept { return hold_limit_us_; }
    // Times the port went down and came back, and the longest time it stayed down so far.
    std::uint64_t downs() const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return downs_;
    }
    std::uint64_t ups() const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return ups_;
    }
    std::uint64_t longest_down_us() const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return longest_down_us_;
    }

    // PORT_ERR (or a query that found the port not active). True when the port was up until now: posts are to
    // be held from here on.
    bool on_down(std::uint64_t now_us) noexcept;
    // PORT_ACTIVE (or a query that found it active). True when the port was down until now: held posts resume.
    // `since_us`, when given, receives when it went down (for the time spent down).
    bool on_up(std::uint64_t now_us, std::uint64_t *since_us = nullptr) noexcept;
    // The port has stayed down longer than the grace period: time to end the job.
    bool grace_expired(std::uint64_t now_us) const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return down_ && grace_us_ != 0 && now_us - down_since_us_ > grace_us_;
    }
    // The port has stayed down longer than hold_limit_us(): no rail may wait for it any more.
    bool outage_expired(std::uint64_t now_us) const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return down_ && hold_limit_us_ != 0 && now_us - down_since_us_ > hold_limit_us_;
    }
    // How long the port has been down (0 when up).
    std::uint64_t down_for_us(std::uint64_t now_us) const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return down_ ? now_us - down_since_us_ : 0;
    }

private:
    mutable std::mutex mutex_;
    const std::uint64_t grace_us_;
    const std::uint64_t hold_limit_us_;
    bool down_ = false;
    std::uint64_t down_since_us_ = 0;
    std::uint64_t downs_ = 0;
    std::uint64_t ups_ = 0;
    std::uint64_t longest_down_us_ = 0;
};

}  // namespace xrc
