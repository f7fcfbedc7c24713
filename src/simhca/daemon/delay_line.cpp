// SPDX-License-Identifier: BSD-3-Clause
#include "delay_line.hpp"

#include <algorithm>
#include <sys/epoll.h>
#include <sys/timerfd.h>

namespace simhca {

DelayLine::DelayLine(int epoll_fd, uint64_t tag)
    : timer_(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) {
    if (!timer_) return; // then held frames only move on the next set()/hold()
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, timer_.get(), &ev);
}

void DelayLine::set(uint16_t lid, uint64_t delay_ns) {
    if (delay_ns) {
        delay_[lid] = delay_ns;
        return;
    }
    delay_.erase(lid);
    auto it = held_.find(lid);
    if (it == held_.end()) return;
    for (Frame &f : it->second) f.due_ns = 0; // due now, still in order
    rearm();
}

bool DelayLine::holding(uint16_t lid) const { return delay_.count(lid) || held_.count(lid); }

void DelayLine::hold(uint16_t lid, Frame f) {
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
    auto d = delay_.find(lid);
    f.due_ns = now + (d == delay_.end() ? 0 : d->second);
    auto &q = held_[lid];
    if (!q.empty()) f.due_ns = std::max(f.due_ns, q.back().due_ns);
    q.push_back(std::move(f));
    rearm();
}

bool DelayLine::pop_due(uint64_t now, uint16_t &lid, Frame &f) {
    for (auto it = held_.begin(); it != held_.end(); ++it) {
        auto &q = it->second;
        if (q.empty() || q.front().due_ns > now) continue;
        lid = it->first;
        f = std::move(q.front());
        q.pop_front();
        if (q.empty()) held_.erase(it);
        return true;
    }
    return false;
}

void DelayLine::drain_timer() {
    uint64_t n;
    if (timer_) (void)!::read(timer_.get(), &n, sizeof(n));
}

void DelayLine::rearm() {
    if (!timer_) return;
    uint64_t next = 0;
    for (auto &[lid, q] : held_)
        if (!q.empty() && (!next || q.front().due_ns < next)) next = q.front().due_ns;
    itimerspec its{};
    if (!held_.empty()) { // absolute; 0 would disarm, so "due now" is 1 ns after the epoch
        next = std::max<uint64_t>(next, 1);
        its.it_value.tv_sec = time_t(next / 1000000000ull);
        its.it_value.tv_nsec = long(next % 1000000000ull);
    }
    ::timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &its, nullptr);
}

} // namespace simhca
