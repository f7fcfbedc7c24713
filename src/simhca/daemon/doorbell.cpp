// SPDX-License-Identifier: BSD-3-Clause
// Doorbells and the awake word (doorbell.hpp).
#include "doorbell.hpp"

#include <cerrno>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "completer.hpp"
#include "requester.hpp"

namespace simhca {

// A QP in ERR completes what was posted with a flush error; any other takes it into its send queue.
void Doorbells::pull(uint32_t qpn) {
    Qp *qp = objs_.qp_by_num(qpn);
    if (!qp) return;
    if (qp->state == IBV_QPS_ERR)
        comp_.flush_qp(*qp);
    else
        req_.pull_sq(*qp);
}

void Doorbells::ring(Client &c) {
    // (The doorbell eventfd is edge-triggered in epoll: its counter is never read back.)
    // A copy: the loop must not see the list change under it (kept to avoid an allocation per doorbell).
    std::vector<uint32_t> &mine = qpns_;
    mine.assign(c.qpns.begin(), c.qpns.end());
    for (uint32_t qpn : mine) pull(qpn);
}

int Doorbells::setup_awake_page() {
    UniqueFd fd(::memfd_create("simhca-awake", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd || ::ftruncate(fd.get(), 4096) < 0) return errno;
    void *p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) return errno;
    // Only we write it: a client that could would make every other client skip its doorbells.
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        int e = errno;
        ::munmap(p, 4096);
        return e;
    }
    awake_ = new (p) std::atomic<uint32_t>(1);
    awake_fd_ = std::move(fd);
    return 0;
}

bool Doorbells::going_to_sleep() {
    if (!awake_) return false;
    awake_->store(0, std::memory_order_relaxed);
    // Store awake = 0, then load the producer indices; a client stores its index, then loads awake
    // (lib ring_doorbell_sq). With full fences on both sides one of us sees the other's store.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    std::vector<uint32_t> &work = qpns_;
    work.clear();
    for (auto &[qpn, qp] : objs_.qps) {
        if (!qp->ctl || !qp->sq_entries || qp->type == IBV_QPT_XRC_RECV) continue;
        uint32_t head = qp->ctl->sq.head.load(std::memory_order_acquire);
        if (head != qp->sq_seen) {
            qp->sq_seen = head;
            work.push_back(qpn);
        }
    }
    if (work.empty()) return false;
    awake_->store(1, std::memory_order_relaxed);
    for (uint32_t qpn : work) pull(qpn);
    return true;
}

}  // namespace simhca
