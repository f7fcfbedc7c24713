// SPDX-License-Identifier: BSD-3-Clause
#include "parallel_copy.hpp"

#include <cerrno>
#include <climits>
#include <linux/futex.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace simhca {

namespace {
constexpr uint32_t kStop = UINT32_MAX;

void futex_wait(std::atomic<uint32_t> &w, uint32_t seen) {
    ::syscall(SYS_futex, reinterpret_cast<uint32_t *>(&w), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t> &w) {
    ::syscall(SYS_futex, reinterpret_cast<uint32_t *>(&w), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}
constexpr uint64_t kFieldMask = (uint64_t(1) << 24) - 1;
uint64_t pack(uint32_t gen, uint64_t count) { return (uint64_t(gen & 0xffff) << 48) | (count << 24); }
uint64_t count_of(uint64_t w) { return (w >> 24) & kFieldMask; }
uint64_t index_of(uint64_t w) { return w & kFieldMask; }
} // namespace

// The helper runs in the engine thread's scheduling class (SCHED_RR when the daemon has it, else its raised
// nice): a helper that waits behind busy-polling applications would leave the engine to copy alone. It is
// set explicitly because SCHED_RESET_ON_FORK (main.cpp) resets new threads too, not only forked children.
ParallelCopy::ParallelCopy(size_t chunk) : chunk_(chunk), helper_bounce_(new uint8_t[chunk]) {
    int policy = ::sched_getscheduler(0);
    sched_param param{};
    ::sched_getparam(0, &param);
    errno = 0;
    int nice = ::getpriority(PRIO_PROCESS, 0); // (this thread's: Linux nice values are per thread)
    if (errno) nice = 0;
    helper_ = std::thread([this, policy, param, nice] {
        if (policy < 0 || ::sched_setscheduler(0, policy, &param) != 0 || (policy & ~SCHED_RESET_ON_FORK) == SCHED_OTHER)
            (void)::setpriority(PRIO_PROCESS, 0, nice);
        helper_main();
    });
}

ParallelCopy::~ParallelCopy() {
    wake_.store(kStop, std::memory_order_seq_cst);
    futex_wake(wake_);
    helper_.join();
}

void ParallelCopy::work(uint8_t *bounce) {
    uint64_t cur = next_.load(std::memory_order_seq_cst);
    for (;;) {
        if (index_of(cur) >= count_of(cur)) return;
        if (!next_.compare_exchange_weak(cur, cur + 1, std::memory_order_seq_cst)) continue;
        size_t off = size_t(index_of(cur)) * chunk_;
        size_t len = std::min(chunk_, total_ - off);
        if (err_.load(std::memory_order_relaxed) == 0)
            if (int e = fn_(ctx_, off, len, bounce)) {
                int none = 0;
                err_.compare_exchange_strong(none, e);
            }
        cur = next_.load(std::memory_order_seq_cst);
    }
}

int ParallelCopy::run(size_t total, ChunkFn fn, void *ctx, uint8_t *bounce) {
    uint64_t chunks = (total + chunk_ - 1) / chunk_;
    if (chunks > kFieldMask) return E2BIG; // (never: a message is at most 1 GiB, 8192 chunks of 128 KiB)
    // next_ still says "nothing left" (the last run() returned after every chunk was claimed and the
    // helper left the one it copied), so nobody reads the job fields now.
    fn_ = fn;
    ctx_ = ctx;
    total_ = total;
    err_.store(0, std::memory_order_relaxed);
    ++gen_;
    if (gen_ == kStop) gen_ = 1;
    next_.store(pack(gen_, chunks), std::memory_order_seq_cst); // publishes the fields above
    wake_.store(gen_, std::memory_order_seq_cst);
    if (helper_sleeping_.load(std::memory_order_seq_cst)) futex_wake(wake_);
    work(bounce);
    // Every chunk is claimed; wait for a chunk the helper is still copying (it cannot claim another).
    // helper_inside_ is raised before the helper reads next_, so a helper that raises it after this
    // load finds nothing left to claim.
    for (unsigned spins = 0; helper_inside_.load(std::memory_order_seq_cst) != 0; ++spins) {
        if (spins < 4096) __builtin_ia32_pause();
        else ::sched_yield(); // the helper was preempted mid-chunk
    }
    return err_.load(std::memory_order_relaxed);
}

void ParallelCopy::helper_main() {
    uint32_t seen = 0;
    for (;;) {
        uint32_t w = wake_.load(std::memory_order_seq_cst);
        if (w == kStop) return;
        if (w == seen) {
            helper_sleeping_.store(true, std::memory_order_seq_cst);
            // run() stores wake_ and then loads helper_sleeping_; we store helper_sleeping_ and then
            // (inside FUTEX_WAIT, atomically with going to sleep) compare wake_: no lost wake-up.
            futex_wait(wake_, seen);
            helper_sleeping_.store(false, std::memory_order_seq_cst);
            continue;
        }
        seen = w;
        helper_inside_.fetch_add(1, std::memory_order_seq_cst);
        work(helper_bounce_.get());
        helper_inside_.fetch_sub(1, std::memory_order_seq_cst);
    }
}

} // namespace simhca
