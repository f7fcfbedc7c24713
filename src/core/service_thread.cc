// SPDX-License-Identifier: BSD-3-Clause
#include "service_thread.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <optional>
#include <system_error>

namespace xrc {

std::uint64_t monotonic_us() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return std::uint64_t(ts.tv_sec) * 1000000u + std::uint64_t(ts.tv_nsec) / 1000u;
}

ServiceThread::ServiceThread(std::vector<Source> sources, std::function<std::uint64_t()> timers)
    : sources_(std::move(sources)), timers_(std::move(timers)) {}

ServiceThread::~ServiceThread() {
    if (thread_.joinable()) {
        stop_.store(true, std::memory_order_release);
        wake();
        thread_.join();
    }
    if (wake_fd_ >= 0) close(wake_fd_);
}

Result<void> ServiceThread::start(const char *name) {
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return Error::from_errno("eventfd");
    // Created with every signal blocked, so the thread inherits that mask: signals go to the application's threads.
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    // std::thread says "no thread" by throwing std::system_error: turned into an Error here, where it is expected.
    std::optional<Error> refused;
    try {
        thread_ = std::thread([this] { run(); });
    } catch (const std::system_error &e) {
        refused.emplace(ErrorKind::system, std::string("cannot start a thread: ") + e.what());
    }
    pthread_sigmask(SIG_SETMASK, &saved, nullptr);
    if (refused) return std::move(*refused);
    (void)pthread_setname_np(thread_.native_handle(), name);
    return {};
}

void ServiceThread::wake() noexcept {
    if (wake_fd_ < 0) return;
    const std::uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
}

void ServiceThread::run() noexcept {
    std::vector<pollfd> fds(sources_.size() + 1);
    fds[0] = {wake_fd_, POLLIN, 0};
    for (std::size_t i = 0; i < sources_.size(); ++i) fds[i + 1] = {sources_[i].fd, POLLIN, 0};
    while (!stop_.load(std::memory_order_acquire)) {
        const std::uint64_t next = timers_ ? timers_() : UINT64_MAX;
        int timeout = -1;
        if (next != UINT64_MAX) {
            const std::uint64_t now = monotonic_us();
            timeout = next <= now ? 0 : static_cast<int>(std::min<std::uint64_t>((next - now + 999) / 1000, INT_MAX));
        }
        const int n = poll(fds.data(), fds.size(), timeout);
        if (n <= 0) continue;  // the timer (or EINTR)
        if (fds[0].revents != 0) {
            std::uint64_t count = 0;
            (void)!read(wake_fd_, &count, sizeof(count));
        }
        for (std::size_t i = 1; i < fds.size(); ++i) {
            if (fds[i].revents == 0) continue;
            sources_[i - 1].ready();
            // An fd in error (a device gone) would wake us forever: it is watched no more.
            if ((fds[i].revents & POLLIN) == 0) fds[i].fd = -1;
        }
    }
}

}  // namespace xrc
