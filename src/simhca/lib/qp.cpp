// SPDX-License-Identifier: BSD-3-Clause
// Queue pairs: create (RC, UD, XRC_SEND, XRC_RECV), open (XRC TGT handles),
// modify, query, destroy. The state machine itself is enforced by the daemon.
#include <cerrno>
#include <cstring>
#include <new>
#include <unistd.h>

#include "lib.hpp"

using namespace simhca;
using namespace simhca::lib;

namespace simhca::lib {

static ibv_qp *make_qp(ibv_context *context, ibv_qp_init_attr_ex &a) noexcept {
    auto *qp = new (std::nothrow) Qp();
    if (!qp) return fail<ibv_qp>(ENOMEM);
    proto::Request req{};
    proto::Response resp{};
    auto &q = req.create_qp;
    q.type = a.qp_type;
    q.pd = a.pd ? a.pd->handle : 0;
    q.send_cq = a.send_cq ? a.send_cq->handle : 0;
    q.recv_cq = a.recv_cq ? a.recv_cq->handle : 0;
    q.srq = a.srq ? a.srq->handle : 0;
    q.xrcd = (a.comp_mask & IBV_QP_INIT_ATTR_XRCD) && a.xrcd ? reinterpret_cast<Xrcd *>(a.xrcd)->handle : 0;
    q.sq_sig_all = a.sq_sig_all;
    q.cap = a.cap;
    q.cookie = reinterpret_cast<uint64_t>(&qp->qpx.qp_base);
    int fd = -1;
    if (int e = ctx_of(context)->conn.call(proto::Op::CreateQp, req, resp, -1, &fd, 1)) {
        delete qp;
        return fail<ibv_qp>(e);
    }
    auto r = resp.create_qp;
    if (a.qp_type != IBV_QPT_XRC_RECV) {
        if (fd < 0 || qp->map.map(fd, shm::qp_region_size(r.sq_entries, r.rq_entries))) {
            proto::Request d{};
            d.h.handle = r.handle;
            ctx_of(context)->conn.call(proto::Op::DestroyQp, d, resp);
            delete qp;
            return fail<ibv_qp>(ENOMEM);
        }
        char *base = static_cast<char *>(qp->map.base);
        qp->ctl = reinterpret_cast<shm::QpCtl *>(base);
        qp->sq = reinterpret_cast<shm::SendWqe *>(base + shm::kQpSqOffset);
        qp->rq = reinterpret_cast<shm::RecvWqe *>(base + shm::qp_rq_offset(r.sq_entries));
    } else if (fd >= 0) {
        ::close(fd);
    }
    qp->sq_entries = r.sq_entries;
    qp->rq_entries = r.rq_entries;
    qp->cap = r.cap;
    a.cap = r.cap;
    ibv_qp &b = qp->qpx.qp_base;
    b.context = context;
    b.qp_context = a.qp_context;
    b.pd = a.qp_type == IBV_QPT_XRC_RECV ? nullptr : a.pd;
    b.send_cq = a.send_cq;
    b.recv_cq = a.recv_cq;
    b.srq = a.srq;
    b.handle = r.handle;
    b.qp_num = r.qpn;
    b.state = IBV_QPS_RESET;
    b.qp_type = a.qp_type;
    pthread_mutex_init(&b.mutex, nullptr);
    pthread_cond_init(&b.cond, nullptr);
    init_qp_ex_ops(*qp);
    ctx_of(context)->reg(b.handle, qp);
    return &b;
}

ibv_qp *create_qp_ex(ibv_context *context, ibv_qp_init_attr_ex *attr) noexcept {
    if (!context || !attr) return fail<ibv_qp>(EINVAL);
    uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                     IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if (attr->comp_mask & ~known) return fail<ibv_qp>(EOPNOTSUPP);
    // Blocking multicast loopback is trivially true here (no multicast).
    uint32_t flags_ok = attr->qp_type == IBV_QPT_UD ? IBV_QP_CREATE_BLOCK_SELF_MCAST_LB : 0;
    if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && (attr->create_flags & ~flags_ok))
        return fail<ibv_qp>(EOPNOTSUPP);
    constexpr uint64_t kSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                  IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                                  IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                                  IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
                                  IBV_QP_EX_WITH_SEND_WITH_INV;
    if ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (attr->send_ops_flags & ~kSendOps))
        return fail<ibv_qp>(EOPNOTSUPP);
    if (attr->qp_type == IBV_QPT_XRC_RECV) {
        if (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd) return fail<ibv_qp>(EINVAL);
    } else if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
        return fail<ibv_qp>(EINVAL);
    }
    ibv_qp_init_attr_ex a = *attr;
    ibv_qp *qp = make_qp(context, a);
    if (qp) attr->cap = a.cap;
    return qp;
}

ibv_qp *open_qp(ibv_context *context, ibv_qp_open_attr *attr) noexcept {
    if (!context || !attr) return fail<ibv_qp>(EINVAL);
    uint32_t need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    if ((attr->comp_mask & need) != need || !attr->xrcd) return fail<ibv_qp>(EINVAL);
    if (attr->comp_mask & ~uint32_t(need | IBV_QP_OPEN_ATTR_CONTEXT)) return fail<ibv_qp>(EOPNOTSUPP);
    auto *qp = new (std::nothrow) Qp();
    if (!qp) return fail<ibv_qp>(ENOMEM);
    proto::Request req{};
    proto::Response resp{};
    req.open_qp.qpn = attr->qp_num;
    req.open_qp.xrcd = reinterpret_cast<Xrcd *>(attr->xrcd)->handle;
    req.open_qp.type = attr->qp_type;
    req.open_qp.cookie = reinterpret_cast<uint64_t>(&qp->qpx.qp_base);
    if (int e = ctx_of(context)->conn.call(proto::Op::OpenQp, req, resp)) {
        delete qp;
        return fail<ibv_qp>(e);
    }
    ibv_qp &b = qp->qpx.qp_base;
    b.context = context;
    b.qp_context = (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? attr->qp_context : nullptr;
    b.handle = resp.create_qp.handle;
    b.qp_num = resp.create_qp.qpn;
    b.state = IBV_QPS_UNKNOWN;
    b.qp_type = attr->qp_type;
    pthread_mutex_init(&b.mutex, nullptr);
    pthread_cond_init(&b.cond, nullptr);
    init_qp_ex_ops(*qp);
    ctx_of(context)->reg(b.handle, qp);
    return &b;
}

} // namespace simhca::lib

SIMHCA_API ibv_qp *ibv_create_qp(ibv_pd *pd, ibv_qp_init_attr *attr) noexcept {
    if (!pd || !attr) return fail<ibv_qp>(EINVAL);
    ibv_qp_init_attr_ex a{};
    std::memcpy(&a, attr, sizeof(*attr));
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    a.pd = pd;
    ibv_qp *qp = make_qp(pd->context, a);
    if (qp) attr->cap = a.cap;
    return qp;
}

SIMHCA_API int ibv_modify_qp(ibv_qp *qp, ibv_qp_attr *attr, int attr_mask) noexcept {
    if (!qp || !attr) return EINVAL;
    proto::Request req{};
    proto::Response resp{};
    req.modify_qp.handle = qp->handle;
    req.modify_qp.mask = attr_mask;
    req.modify_qp.attr = *attr;
    if (int e = ctx_of(qp->context)->conn.call(proto::Op::ModifyQp, req, resp)) return e;
    if (attr_mask & IBV_QP_STATE) {
        qp->state = attr->qp_state;
        if (attr->qp_state == IBV_QPS_RESET) {
            clean_cq(qp->send_cq, qp->qp_num);
            if (qp->recv_cq != qp->send_cq) clean_cq(qp->recv_cq, qp->qp_num);
        }
    }
    return 0;
}

SIMHCA_API int ibv_query_qp(ibv_qp *qp, ibv_qp_attr *attr, int attr_mask, ibv_qp_init_attr *init_attr) noexcept {
    (void)attr_mask; // everything is cheap to return
    if (!qp || !attr || !init_attr) return EINVAL;
    proto::Request req{};
    proto::Response resp{};
    req.h.handle = qp->handle;
    if (int e = ctx_of(qp->context)->conn.call(proto::Op::QueryQp, req, resp)) return e;
    *attr = resp.query_qp.attr;
    std::memset(init_attr, 0, sizeof(*init_attr));
    init_attr->qp_context = qp->qp_context;
    init_attr->send_cq = qp->send_cq;
    init_attr->recv_cq = qp->recv_cq;
    init_attr->srq = qp->srq;
    init_attr->cap = resp.query_qp.cap;
    init_attr->qp_type = qp->qp_type;
    init_attr->sq_sig_all = int(resp.query_qp.sq_sig_all);
    qp->state = attr->qp_state;
    return 0;
}

SIMHCA_API int ibv_destroy_qp(ibv_qp *qp) noexcept {
    if (!qp) return EINVAL;
    proto::Request req{};
    proto::Response resp{};
    req.h.handle = qp->handle;
    int e = ctx_of(qp->context)->conn.call(proto::Op::DestroyQp, req, resp);
    if (e && e != ENODEV) return e;
    ctx_of(qp->context)->unreg(qp->handle);
    { // every async event the application read must have been acked
        Qp *self = qp_of(qp);
        pthread_mutex_lock(&qp->mutex);
        while (qp->events_completed != self->events_reported) pthread_cond_wait(&qp->cond, &qp->mutex);
        pthread_mutex_unlock(&qp->mutex);
    }
    clean_cq(qp->send_cq, qp->qp_num);
    if (qp->recv_cq != qp->send_cq) clean_cq(qp->recv_cq, qp->qp_num);
    Qp *q = qp_of(qp);
    q->map.unmap();
    pthread_mutex_destroy(&qp->mutex);
    pthread_cond_destroy(&qp->cond);
    delete q;
    return 0;
}

SIMHCA_API ibv_qp_ex *ibv_qp_to_qp_ex(ibv_qp *qp) noexcept {
    // Every QP we create is an extended one.
    return qp ? &qp_of(qp)->qpx : nullptr;
}
