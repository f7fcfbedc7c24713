// SPDX-License-Identifier: BSD-3-Clause
// XRC domains and shared receive queues (basic and XRC).
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <new>

#include "lib.hpp"

using namespace simhca;
using namespace simhca::lib;

namespace simhca::lib {

ibv_xrcd *open_xrcd(ibv_context *context, ibv_xrcd_init_attr *attr) noexcept {
    if (!context || !attr) return fail<ibv_xrcd>(EINVAL);
    if (attr->comp_mask & ~uint32_t(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS))
        return fail<ibv_xrcd>(EOPNOTSUPP);
    if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS))
        return fail<ibv_xrcd>(EINVAL);
    proto::Request req{};
    proto::Response resp{};
    req.open_xrcd.oflags = attr->oflags;
    req.open_xrcd.has_fd = attr->fd != -1;
    // The daemon identifies the domain by the inode of this very fd.
    if (int e = ctx_of(context)->conn.call(proto::Op::OpenXrcd, req, resp, attr->fd)) return fail<ibv_xrcd>(e);
    auto *x = new (std::nothrow) Xrcd{};
    if (!x) return fail<ibv_xrcd>(ENOMEM);
    x->xrcd.context = context;
    x->handle = resp.open_xrcd.handle;
    return &x->xrcd;
}

int close_xrcd(ibv_xrcd *xrcd) noexcept {
    if (!xrcd) return EINVAL;
    auto *x = reinterpret_cast<Xrcd *>(xrcd);
    proto::Request req{};
    proto::Response resp{};
    req.h.handle = x->handle;
    if (int e = ctx_of(xrcd->context)->conn.call(proto::Op::CloseXrcd, req, resp); e && e != ENODEV) return e;
    delete x;
    return 0;
}

static Srq *make_srq(ibv_context *context, ibv_pd *pd, ibv_srq_type type, ibv_xrcd *xrcd, ibv_cq *cq,
                     ibv_srq_attr &a, void *srq_context, const ibv_tm_cap *tm = nullptr) noexcept {
    auto *s = new (std::nothrow) Srq();
    if (!s) return fail<Srq>(ENOMEM);
    proto::Request req{};
    proto::Response resp{};
    auto &q = req.create_srq;
    q.type = type;
    q.pd = pd ? pd->handle : 0;
    q.xrcd = xrcd ? reinterpret_cast<Xrcd *>(xrcd)->handle : 0;
    q.cq = cq ? cq->handle : 0;
    q.max_wr = a.max_wr;
    q.max_sge = a.max_sge;
    q.srq_limit = a.srq_limit;
    q.cookie = reinterpret_cast<uint64_t>(&s->srq);
    if (tm) {
        q.tm_max_num_tags = tm->max_num_tags;
        q.tm_max_ops = tm->max_ops;
    }
    int fd = -1;
    if (int e = ctx_of(context)->conn.call(proto::Op::CreateSrq, req, resp, -1, &fd, 1)) {
        delete s;
        return fail<Srq>(e);
    }
    auto r = resp.create_srq;
    if (fd < 0 || s->map.map(fd, shm::srq_region_size(r.entries))) {
        proto::Request d{};
        d.h.handle = r.handle;
        ctx_of(context)->conn.call(proto::Op::DestroySrq, d, resp);
        delete s;
        return fail<Srq>(ENOMEM);
    }
    s->srqn = r.srqn;
    s->entries = r.entries;
    s->max_sge = r.max_sge;
    s->ctl = static_cast<shm::SrqCtl *>(s->map.base);
    s->ring = reinterpret_cast<shm::RecvWqe *>(static_cast<char *>(s->map.base) + shm::kSrqEntriesOffset);
    s->srq.context = context;
    s->srq.srq_context = srq_context;
    s->srq.pd = pd;
    s->srq.handle = r.handle;
    pthread_mutex_init(&s->srq.mutex, nullptr);
    pthread_cond_init(&s->srq.cond, nullptr);
    a.max_wr = r.entries;
    a.max_sge = r.max_sge;
    ctx_of(context)->reg(r.handle, s);
    return s;
}

ibv_srq *create_srq_ex(ibv_context *context, ibv_srq_init_attr_ex *attr) noexcept {
    if (!context || !attr) return fail<ibv_srq>(EINVAL);
    uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
                     IBV_SRQ_INIT_ATTR_TM;
    if (attr->comp_mask & ~known) return fail<ibv_srq>(EOPNOTSUPP);
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD)) return fail<ibv_srq>(EINVAL);
    ibv_srq_type type = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
    if (type == IBV_SRQT_XRC && (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) ||
                                 !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->xrcd || !attr->cq))
        return fail<ibv_srq>(EINVAL);
    // A TM SRQ reports to a CQ of its own, like an XRC SRQ (tag_matching.md).
    if (type == IBV_SRQT_TM && (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TM) ||
                                !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq))
        return fail<ibv_srq>(EINVAL);
    if (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC && type != IBV_SRQT_TM) return fail<ibv_srq>(EOPNOTSUPP);
    Srq *s = make_srq(context, attr->pd, type, type == IBV_SRQT_XRC ? attr->xrcd : nullptr,
                      type != IBV_SRQT_BASIC ? attr->cq : nullptr, attr->attr, attr->srq_context,
                      type == IBV_SRQT_TM ? &attr->tm_cap : nullptr);
    return s ? &s->srq : nullptr;
}

int get_srq_num(ibv_srq *srq, uint32_t *num) noexcept {
    if (!srq || !num) return EINVAL;
    *num = reinterpret_cast<Srq *>(srq)->srqn;
    return 0;
}

} // namespace simhca::lib

SIMHCA_API ibv_srq *ibv_create_srq(ibv_pd *pd, ibv_srq_init_attr *attr) noexcept {
    if (!pd || !attr) return fail<ibv_srq>(EINVAL);
    Srq *s = make_srq(pd->context, pd, IBV_SRQT_BASIC, nullptr, nullptr, attr->attr, attr->srq_context);
    return s ? &s->srq : nullptr;
}

// IBV_SRQ_MAX_WR may move the ring to a new shared region (the daemon copies
// the posted WQEs): no posting meanwhile, then map the new one.
SIMHCA_API int ibv_modify_srq(ibv_srq *srq, ibv_srq_attr *attr, int mask) noexcept {
    if (!srq || !attr) return EINVAL;
    auto *s = reinterpret_cast<Srq *>(srq);
    std::lock_guard<std::mutex> g(s->mu);
    proto::Request req{};
    proto::Response resp{};
    req.modify_srq = {srq->handle, mask, *attr};
    int fd = -1;
    if (int e = ctx_of(srq->context)->conn.call(proto::Op::ModifySrq, req, resp, -1, &fd, 1)) return e;
    if (fd < 0) return 0; // same ring
    Mapping m;
    if (m.map(fd, shm::srq_region_size(resp.create_srq.entries))) return ENOMEM;
    s->map.unmap();
    s->map = m;
    s->entries = resp.create_srq.entries;
    s->ctl = static_cast<shm::SrqCtl *>(m.base);
    s->ring = reinterpret_cast<shm::RecvWqe *>(static_cast<char *>(m.base) + shm::kSrqEntriesOffset);
    return 0;
}

SIMHCA_API int ibv_query_srq(ibv_srq *srq, ibv_srq_attr *attr) noexcept {
    if (!srq || !attr) return EINVAL;
    proto::Request req{};
    proto::Response resp{};
    req.h.handle = srq->handle;
    if (int e = ctx_of(srq->context)->conn.call(proto::Op::QuerySrq, req, resp)) return e;
    *attr = resp.srq_attr.attr;
    return 0;
}

SIMHCA_API int ibv_destroy_srq(ibv_srq *srq) noexcept {
    if (!srq) return EINVAL;
    proto::Request req{};
    proto::Response resp{};
    req.h.handle = srq->handle;
    int e = ctx_of(srq->context)->conn.call(proto::Op::DestroySrq, req, resp);
    if (e && e != ENODEV) return e;
    auto *s = reinterpret_cast<Srq *>(srq);
    ctx_of(srq->context)->unreg(srq->handle);
    pthread_mutex_lock(&srq->mutex); // every async event read must have been acked
    while (srq->events_completed != s->events_reported) pthread_cond_wait(&srq->cond, &srq->mutex);
    pthread_mutex_unlock(&srq->mutex);
    s->map.unmap();
    pthread_mutex_destroy(&srq->mutex);
    pthread_cond_destroy(&srq->cond);
    delete s;
    return 0;
}
