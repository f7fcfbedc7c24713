// SPDX-License-Identifier: BSD-3-Clause
// Fault injection "delay" (simhca-ctl fault delay NODE MS): frames to and
// from a node wait here for a fixed time before they are sent / handled.
// One FIFO per node keeps them in order (a frame is never due before the one
// queued ahead of it, even when the delay shrinks), and a timerfd in the
// daemon's epoll set says when the head of some FIFO is due.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "../common/unique_fd.hpp"

namespace simhca {

class DelayLine {
public:
    struct Frame {
        bool inbound = false; // received from the node (else: to be sent to it)
        uint32_t conn_id = 0; // connection it came on / a reply goes out on (0: the node's outgoing one)
        uint32_t type = 0;
        uint64_t token = 0;
        std::vector<uint8_t> body;
        uint64_t due_ns = 0;
    };

    // Registers a timerfd in `epoll_fd` with `tag` as its epoll data.
    DelayLine(int epoll_fd, uint64_t tag);
    DelayLine(const DelayLine &) = delete;
    DelayLine &operator=(const DelayLine &) = delete;

    // 0 = no delay; frames already held for that node then become due at once.
    void set(uint16_t lid, uint64_t delay_ns);
    // True while the node's frames must pass through here (delayed, or
    // earlier frames still waiting: a later one must not overtake them).
    bool holding(uint16_t lid) const;
    void hold(uint16_t lid, Frame f);
    // Removes the oldest frame due at `now` (one at a time: handling it may
    // queue new frames, which must stay behind the node's older ones).
    bool pop_due(uint64_t now, uint16_t &lid, Frame &f);
    void rearm();       // timer for the next due frame (after pop_due calls)
    void drain_timer(); // reads the timerfd's expiry count

private:

    UniqueFd timer_;
    std::map<uint16_t, uint64_t> delay_;
    std::map<uint16_t, std::deque<Frame>> held_;
};

} // namespace simhca
