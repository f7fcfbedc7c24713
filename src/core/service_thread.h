// SPDX-License-Identifier: BSD-3-Clause
// A thread that sleeps in poll() on a few file descriptors (a completion channel, a device's async fd) and on one
// timer, and runs a source's handler when its fd is readable, the timer handler when it is due. While nothing
// arrives and no timer runs it makes no system call at all: its whole cost when idle is one blocked poll().
// Handlers run on this thread only, one at a time; whatever they share with other threads is theirs to guard.
#pragma once

#include "result.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace xrc {

class ServiceThread {
public:
    struct Source {
        int fd;
        std::function<void()> ready;  // the fd is readable (or in error: then it is watched no more)
    };
    // `timers` runs what is due and returns when it next wants running (CLOCK_MONOTONIC microseconds), or
    // UINT64_MAX when no timer runs.
    ServiceThread(std::vector<Source> sources, std::function<std::uint64_t()> timers);
    ServiceThread(const ServiceThread &) = delete;
    ServiceThread &operator=(const ServiceThread &) = delete;
    ~ServiceThread();  // stops and joins

    // Starts the thread (every signal blocked in it: they stay the application's), or says why it could not.
    Result<void> start(const char *name);
    // A timer was set from another thread: the sleep is recomputed. Any thread, any time.
    void wake() noexcept;
    bool running() const noexcept { return thread_.joinable(); }

private:
    void run() noexcept;

    std::vector<Source> sources_;
    std::function<std::uint64_t()> timers_;
    int wake_fd_ = -1;  // an eventfd
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

std::uint64_t monotonic_us() noexcept;

}  // namespace xrc
