// SPDX-License-Identifier: BSD-3-Clause
// Completion channels and CQs. Polling reads CQEs straight from the shared
// ring (no syscall); arming writes a flag the daemon checks when it adds a
// CQE, and events arrive as records on the channel's pipe.
#include <cerrno>
#include <cstring>
#include <new>
#include <sched.h>
#include <unistd.h>

#include "lib.hpp"

using namespace simhca;
using namespace simhca::lib;

SIMHCA_API ibv_comp_channel *ibv_create_comp_channel(ibv_context *context) noexcept {
    if (!context) return fail<ibv_comp_channel>(EINVAL);
    proto::Request req{};
    proto::Response resp{};
    int fd = -1;
    if (int e = ctx_of(context)->conn.call(proto::Op::CreateChannel, req, resp, -1, &fd, 1))
        return fail<ibv_comp_channel>(e);
    if (fd < 0) return fail<ibv_comp_channel>(EPROTO);
    auto *ch = new (std::nothrow) Channel{};
    if (!ch) {
        ::close(fd);
        return fail<ibv_comp_channel>(ENOMEM);
    }
    ch->ch.context = context;
    ch->ch.fd = fd;
    ch->ch.refcnt = 0;
    ch->handle = resp.h.handle;
    return &ch->ch;
}

SIMHCA_API int ibv_destroy_comp_channel(ibv_comp_channel *channel) noexcept {
    if (!channel) return EINVAL;
    if (channel->refcnt) return EBUSY;
    auto *ch = reinterpret_cast<Channel *>(channel);
    proto::Request req{};
    proto::Response resp{};
    req.h.handle = ch->handle;
    if (int e = ctx_of(channel->context)->conn.call(proto::Op::DestroyChannel, req, resp); e && e != ENODEV)
        return e;
    ::close(channel->fd);
    delete ch;
    return 0;
}

namespace simhca::lib {

static Cq *make_cq(ibv_context *context, int cqe, void *cq_context, ibv_comp_channel *channel) noexcept {
    if (!context || cqe < 1) return fail<Cq>(EINVAL);
    auto *cq = new (std::nothrow) Cq();
    if (!cq) return fail<Cq>(ENOMEM);
    proto::Request req{};
    proto::Response resp{};
    req.create_cq.cqe = cqe;
    req.create_cq.channel = channel ? reinterpret_cast<Channel *>(channel)->handle : 0;
    req.create_cq.cookie = reinterpret_cast<uint64_t>(&cq->cq);
    int fd = -1;
    if (int e = ctx_of(context)->conn.call(proto::Op::CreateCq, req, resp, -1, &fd, 1)) {
        delete cq;
        return fail<Cq>(e);
    }
    if (fd < 0 || cq->map.map(fd, shm::cq_region_size(resp.create_cq.entries))) {
        proto::Request d{};
        d.h.handle = resp.create_cq.handle;
        ctx_of(context)->conn.call(proto::Op::DestroyCq, d, resp);
        delete cq;
        return fail<Cq>(ENOMEM);
    }
    cq->entries = resp.create_cq.entries;
    cq->ctl = static_cast<shm::CqCtl *>(cq->map.base);
    cq->ring = reinterpret_cast<shm::Cqe *>(static_cast<char *>(cq->map.base) + shm::kCqEntriesOffset);
    ibv_cq_ex &c = cq->cq;
    c.context = context;
    c.channel = channel;
    c.cq_context = cq_context;
    c.handle = resp.create_cq.handle;
    c.cqe = int(cq->entries - 1);
    pthread_mutex_init(&c.mutex, nullptr);
    pthread_cond_init(&c.cond, nullptr);
    if (channel) ++channel->refcnt;
    ctx_of(context)->reg(c.handle, cq);
    return cq;
}

void wc_from_cqe(ibv_wc &wc, const shm::Cqe &e) noexcept {
    wc.wr_id = e.wr_id;
    wc.status = ibv_wc_status(e.status);
    wc.opcode = ibv_wc_opcode(e.opcode);
    wc.vendor_err = e.vendor_err;
    wc.byte_len = e.byte_len;
    wc.imm_data = e.imm_data;
    wc.qp_num = e.qp_num;
    wc.src_qp = e.src_qp;
    wc.wc_flags = e.wc_flags;
    wc.pkey_index = e.pkey_index;
    wc.slid = e.slid;
    wc.sl = e.sl;
    wc.dlid_path_bits = e.dlid_path_bits;
}

int poll_cq(ibv_cq *ibcq, int n, ibv_wc *wc) noexcept {
    auto *cq = reinterpret_cast<Cq *>(ibcq);
    std::lock_guard<std::mutex> g(cq->mu);
    uint32_t head = cq->ctl->ring.head.load(std::memory_order_acquire);
    int got = 0;
    while (got < n && cq->tail != head) {
        wc_from_cqe(wc[got++], cq->ring[cq->tail & (cq->entries - 1)]);
        ++cq->tail;
    }
    if (got) {
        cq->ctl->ring.tail.store(cq->tail, std::memory_order_release);
        cq->empty_polls = 0;
    } else if (++cq->empty_polls % 32 == 0) {
        // The "adapter" is a process sharing these CPUs: a caller spinning
        // on an empty CQ must let it run, or it would delay its own
        // completions by a whole scheduler slice.
        sched_yield();
    }
    return got;
}

// Removes the not yet polled CQEs of one QP (as mlx5's cq_clean does when a
// QP is reset or destroyed). Kept entries slide towards the head and the
// consumer index advances; only slots below the head snapshot are touched,
// so the daemon can keep appending concurrently.
void clean_cq(ibv_cq *ibcq, uint32_t qpn) noexcept {
    if (!ibcq) return;
    auto *cq = reinterpret_cast<Cq *>(ibcq);
    std::lock_guard<std::mutex> g(cq->mu);
    uint32_t head = cq->ctl->ring.head.load(std::memory_order_acquire);
    uint32_t mask = cq->entries - 1;
    uint32_t removed = 0;
    for (uint32_t i = head; i-- != cq->tail;) {
        shm::Cqe &e = cq->ring[i & mask];
        if (e.qp_num == qpn) ++removed;
        else if (removed) cq->ring[(i + removed) & mask] = e;
    }
    if (removed) {
        cq->tail += removed;
        cq->ctl->ring.tail.store(cq->tail, std::memory_order_release);
    }
}

int req_notify_cq(ibv_cq *ibcq, int solicited_only) noexcept {
    auto *cq = reinterpret_cast<Cq *>(ibcq);
    if (solicited_only) {
        uint32_t expected = 0; // "next completion" arming is stronger; keep it
        cq->ctl->armed.compare_exchange_strong(expected, 2, std::memory_order_acq_rel);
    } else {
        cq->ctl->armed.store(1, std::memory_order_release);
    }
    // Pairs with the daemon's fence between publishing a CQE and reading
    // `armed`: a CQE the next poll cannot see is guaranteed to raise an event.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return 0;
}

ibv_cq_ex *create_cq_ex(ibv_context *context, ibv_cq_init_attr_ex *attr) noexcept {
    if (!attr) return fail<ibv_cq_ex>(EINVAL);
    if (attr->comp_mask & ~uint32_t(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
        return fail<ibv_cq_ex>(EOPNOTSUPP);
    constexpr uint64_t kSupported = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                                    IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                                    IBV_WC_EX_WITH_DLID_PATH_BITS | IBV_WC_EX_WITH_TM_INFO;
    if (attr->wc_flags & ~kSupported) return fail<ibv_cq_ex>(EOPNOTSUPP);
    if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
        (attr->flags & ~uint32_t(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)))
        return fail<ibv_cq_ex>(EOPNOTSUPP);
    if (attr->comp_vector != 0) return fail<ibv_cq_ex>(EINVAL);
    Cq *cq = make_cq(context, int(attr->cqe), attr->cq_context, attr->channel);
    if (!cq) return nullptr;
    init_cq_ex_ops(*cq);
    return &cq->cq;
}

} // namespace simhca::lib

SIMHCA_API ibv_cq *ibv_create_cq(ibv_context *context, int cqe, void *cq_context, ibv_comp_channel *channel,
                                 int comp_vector) noexcept {
    if (comp_vector != 0) return fail<ibv_cq>(EINVAL);
    Cq *cq = make_cq(context, cqe, cq_context, channel);
    if (!cq) return nullptr;
    init_cq_ex_ops(*cq);
    return ibv_cq_ex_to_cq(&cq->cq);
}

SIMHCA_API int ibv_resize_cq(ibv_cq *ibcq, int cqe) noexcept {
    if (!ibcq || cqe < 1) return EINVAL;
    auto *cq = reinterpret_cast<Cq *>(ibcq);
    std::lock_guard<std::mutex> g(cq->mu); // no polling while the ring moves
    proto::Request req{};
    proto::Response resp{};
    req.resize_cq = {ibcq->handle, cqe};
    int fd = -1;
    if (int e = ctx_of(ibcq->context)->conn.call(proto::Op::ResizeCq, req, resp, -1, &fd, 1)) return e;
    Mapping m;
    if (fd < 0 || m.map(fd, shm::cq_region_size(resp.create_cq.entries))) return ENOMEM;
    cq->map.unmap();
    cq->map = m;
    cq->entries = resp.create_cq.entries;
    cq->ctl = static_cast<shm::CqCtl *>(m.base);
    cq->ring = reinterpret_cast<shm::Cqe *>(static_cast<char *>(m.base) + shm::kCqEntriesOffset);
    cq->tail = 0;
    ibcq->cqe = int(cq->entries - 1);
    return 0;
}

SIMHCA_API int ibv_destroy_cq(ibv_cq *ibcq) noexcept {
    if (!ibcq) return EINVAL;
    auto *cq = reinterpret_cast<Cq *>(ibcq);
    proto::Request req{};
    proto::Response resp{};
    req.h.handle = ibcq->handle;
    int e = ctx_of(ibcq->context)->conn.call(proto::Op::DestroyCq, req, resp);
    if (e && e != ENODEV) return e;
    // Events not read yet are dropped; every event the application did read
    // must be acked first (rdma-core's rule), so wait for the acks.
    ctx_of(ibcq->context)->unreg(ibcq->handle);
    pthread_mutex_lock(&ibcq->mutex);
    while (ibcq->comp_events_completed != cq->comp_reported || ibcq->async_events_completed != cq->async_reported)
        pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
    pthread_mutex_unlock(&ibcq->mutex);
    if (ibcq->channel) --ibcq->channel->refcnt;
    cq->map.unmap();
    pthread_mutex_destroy(&ibcq->mutex);
    pthread_cond_destroy(&ibcq->cond);
    delete cq;
    return 0;
}

SIMHCA_API int ibv_get_cq_event(ibv_comp_channel *channel, ibv_cq **cq, void **cq_context) noexcept {
    if (!channel || !cq || !cq_context) return -1;
    for (;;) {
        proto::CompRecord rec;
        ssize_t n;
        do {
            n = ::read(channel->fd, &rec, sizeof(rec));
        } while (n < 0 && errno == EINTR);
        if (n != sizeof(rec)) return -1; // EAGAIN on a non-blocking channel
        auto *c = static_cast<Cq *>(ctx_of(channel->context)->find(uint32_t(rec.cq_cookie)));
        if (!c) continue; // the CQ was destroyed meanwhile: its event goes with it
        ibv_cq *ibcq = ibv_cq_ex_to_cq(&c->cq);
        pthread_mutex_lock(&ibcq->mutex);
        ++c->comp_reported;
        pthread_mutex_unlock(&ibcq->mutex);
        *cq = ibcq;
        *cq_context = ibcq->cq_context;
        return 0;
    }
}

SIMHCA_API void ibv_ack_cq_events(ibv_cq *cq, unsigned int nevents) noexcept {
    if (!cq) return;
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_signal(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}
