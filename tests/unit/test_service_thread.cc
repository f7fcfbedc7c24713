// SPDX-License-Identifier: BSD-3-Clause
// ServiceThread: a readable fd runs its handler on the thread, a due timer runs, wake() makes the thread look at
// a timer set later, and an idle thread makes no call at all (its timer handler is not polled while nothing is due).
#include "src/core/service_thread.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

using xrc::ServiceThread;

namespace {

template <class F>
bool eventually(F f) {
    for (int i = 0; i < 5000; ++i) {
        if (f()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return f();
}

}  // namespace

TEST(ServiceThread, ReadableFdRunsItsHandlerOnTheThread) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    std::atomic<int> seen{0};
    std::atomic<bool> other_thread{false};
    const auto caller = std::this_thread::get_id();
    {
        ServiceThread t({{fds[0],
                          [&] {
                              char c;
                              if (read(fds[0], &c, 1) == 1) ++seen;
                              other_thread = std::this_thread::get_id() != caller;
                          }}},
                        [] { return UINT64_MAX; });
        const auto started = t.start("test-svc");
        ASSERT_TRUE(started) << started.error().message();
        ASSERT_EQ(write(fds[1], "x", 1), 1);
        EXPECT_TRUE(eventually([&] { return seen.load() == 1; }));
        ASSERT_EQ(write(fds[1], "y", 1), 1);
        EXPECT_TRUE(eventually([&] { return seen.load() == 2; }));
        EXPECT_TRUE(other_thread.load());
    }  // joined here
    close(fds[0]);
    close(fds[1]);
}

TEST(ServiceThread, TimersRunWhenDueAndWakeMakesItLookAgain) {
    std::atomic<std::uint64_t> deadline{UINT64_MAX};
    std::atomic<int> fired{0}, calls{0};
    ServiceThread t({}, [&] {
        ++calls;
        if (deadline.load() != UINT64_MAX && xrc::monotonic_us() >= deadline.load()) {
            ++fired;
            deadline = UINT64_MAX;
        }
        return deadline.load();
    });
    const auto started = t.start("test-svc");
    ASSERT_TRUE(started) << started.error().message();
    ASSERT_TRUE(eventually([&] { return calls.load() >= 1; }));
    // Idle: no timer, nothing readable: the thread sleeps, the handler is not called again.
    const int idle_calls = calls.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(calls.load(), idle_calls);
    deadline = xrc::monotonic_us() + 20000;
    t.wake();
    EXPECT_TRUE(eventually([&] { return fired.load() == 1; }));
}
