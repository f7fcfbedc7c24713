// SPDX-License-Identifier: BSD-3-Clause
// QPs and SRQs on an id: rdma_create_qp(_ex), rdma_destroy_qp, rdma_create_srq(_ex), rdma_destroy_srq,
// rdma_init_qp_attr, and the transitions librdmacm performs: INIT at creation (UD straight to RTS with
// the CM's Q_Key), RTR and RTS when the connection exchange has the peer's QPN/PSN/LID, ERR on disconnect.
#include "cm.hpp"

#include <arpa/inet.h>
#include <algorithm>
#include <cerrno>
#include <cstring>

namespace simhca_cm {

namespace {
uint32_t cm_qkey(const Id &id) noexcept
{
    return id.pub.ps == RDMA_PS_IPOIB ? RDMA_IPOIB_QKEY : RDMA_UDP_QKEY;
}

int rc_access(const Id &id) noexcept
{
    // The QP is set up before the responder resources are negotiated; the peer's initiator depth (0 = no
    // RDMA reads/atomics in flight) is what limits it, so the QP itself allows all remote access.
    (void)id;
    return IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
}
} // namespace

void fill_ud_ah(Id &id, ibv_ah_attr &ah) noexcept
{
    ah = {};
    ah.dlid = id.peer.lid;
    ah.port_num = 1;
    // One subnet: the path needs no GRH (the kernel builds the AH from the path record likewise).
}

int fill_init_qp_attr(Id &id, ibv_qp_attr &attr, int &mask) noexcept
{
    auto &g = global();
    bool rc = connected_ps(id);
    switch (attr.qp_state) {
    case IBV_QPS_INIT:
        attr.pkey_index = 0;
        attr.port_num = 1;
        mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
        if (rc) {
            attr.qp_access_flags = rc_access(id);
            mask |= IBV_QP_ACCESS_FLAGS;
        } else {
            attr.qkey = cm_qkey(id);
            mask |= IBV_QP_QKEY;
        }
        return 0;
    case IBV_QPS_RTR:
        if (!rc) {
            mask = IBV_QP_STATE;
            return 0;
        }
        if (!id.peer_known)
            return EINVAL; // no peer yet
        attr.path_mtu = g.mtu;
        attr.dest_qp_num = id.peer.qpn;
        attr.rq_psn = id.peer.psn;
        attr.max_dest_rd_atomic = id.my_conn.responder_resources ? id.my_conn.responder_resources : 1;
        attr.min_rnr_timer = 12;
        attr.ah_attr = {};
        attr.ah_attr.dlid = id.peer.lid;
        attr.ah_attr.port_num = 1;
        mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        return 0;
    case IBV_QPS_RTS:
        attr.sq_psn = id.psn;
        mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
        if (rc) {
            if (!id.peer_known)
                return EINVAL;
            bool passive = id.passive;
            attr.timeout = id.ack_timeout;
            attr.retry_cnt = passive ? id.peer.retry_count : id.my_conn.retry_count;
            attr.rnr_retry = passive ? id.peer.rnr_retry_count : id.my_conn.rnr_retry_count;
            uint8_t depth = std::min(id.my_conn.initiator_depth, id.peer.responder_resources);
            attr.max_rd_atomic = depth ? depth : 1;
            mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        }
        return 0;
    default:
        return EINVAL;
    }
}

static int move(Id &id, ibv_qp *qp, ibv_qp_state to) noexcept
{
    ibv_qp_attr attr{};
    attr.qp_state = to;
    int mask = 0;
    if (int err = fill_init_qp_attr(id, attr, mask))
        return err;
    return ibv_modify_qp(qp, &attr, mask);
}

int qp_to_init(Id &id, ibv_qp *qp) noexcept
{
    if (int err = move(id, qp, IBV_QPS_INIT))
        return err;
    if (id.pub.qp_type == IBV_QPT_UD) {
        // Unconnected: ready to send as soon as it exists (librdmacm's ucma_init_ud_qp).
        if (int err = move(id, qp, IBV_QPS_RTR))
            return err;
        return move(id, qp, IBV_QPS_RTS);
    }
    return 0;
}

int qp_to_rtr(Id &id, ibv_qp *qp) noexcept { return move(id, qp, IBV_QPS_RTR); }
int qp_to_rts(Id &id, ibv_qp *qp) noexcept { return move(id, qp, IBV_QPS_RTS); }

int qp_to_err(ibv_qp *qp) noexcept
{
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    return ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}

static void destroy_cqs(Id &id) noexcept
{
    if (!id.created_cqs)
        return;
    if (id.pub.send_cq)
        ibv_destroy_cq(id.pub.send_cq);
    if (id.pub.recv_cq)
        ibv_destroy_cq(id.pub.recv_cq);
    if (id.pub.send_cq_channel)
        ibv_destroy_comp_channel(id.pub.send_cq_channel);
    if (id.pub.recv_cq_channel)
        ibv_destroy_comp_channel(id.pub.recv_cq_channel);
    id.pub.send_cq = id.pub.recv_cq = nullptr;
    id.pub.send_cq_channel = id.pub.recv_cq_channel = nullptr;
    id.created_cqs = false;
}

// librdmacm's ucma_create_cqs: a CQ with its own completion channel per direction, so that
// rdma_get_send_comp / rdma_get_recv_comp (inline in rdma_verbs.h) can block on them.
static int create_cqs(Id &id, uint32_t send_size, uint32_t recv_size) noexcept
{
    id.created_cqs = true;
    if (recv_size) {
        id.pub.recv_cq_channel = ibv_create_comp_channel(id.pub.verbs);
        id.pub.recv_cq = id.pub.recv_cq_channel ? ibv_create_cq(id.pub.verbs, static_cast<int>(recv_size), &id.pub,
                                                                id.pub.recv_cq_channel, 0)
                                                : nullptr;
        if (!id.pub.recv_cq)
            goto fail;
    }
    if (send_size) {
        id.pub.send_cq_channel = ibv_create_comp_channel(id.pub.verbs);
        id.pub.send_cq = id.pub.send_cq_channel ? ibv_create_cq(id.pub.verbs, static_cast<int>(send_size), &id.pub,
                                                                id.pub.send_cq_channel, 0)
                                                : nullptr;
        if (!id.pub.send_cq)
            goto fail;
    }
    return 0;
fail:
    int err = errno ? errno : ENOMEM;
    destroy_cqs(id);
    return err;
}

} // namespace simhca_cm

using namespace simhca_cm;

extern "C" {

int rdma_create_qp_ex(rdma_cm_id *cid, ibv_qp_init_attr_ex *attr)
{
    if (!cid || !attr)
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    std::lock_guard lk(global().mu);
    if (!id.pub.verbs || id.pub.qp)
        return fail(EINVAL);
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
        attr->pd = id.pub.pd;
        attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
    }
    if (attr->pd->context != id.pub.verbs)
        return fail(EINVAL);
    if (attr->qp_type != id.pub.qp_type && !(id.pub.ps == RDMA_PS_IB))
        return fail(EINVAL);
    if (!attr->srq && id.pub.srq)
        attr->srq = id.pub.srq;
    bool made_cqs = false;
    if (!attr->send_cq || !attr->recv_cq) {
        if (id.pub.send_cq || id.pub.recv_cq) {
            // CQs the id already has (from rdma_create_srq) serve the QP too.
        } else if (int err = create_cqs(id, attr->send_cq ? 0 : std::max(attr->cap.max_send_wr, 1u),
                                        attr->recv_cq || attr->srq ? 0 : std::max(attr->cap.max_recv_wr, 1u))) {
            return fail(err);
        } else {
            made_cqs = true;
        }
        if (!attr->send_cq)
            attr->send_cq = id.pub.send_cq;
        if (!attr->recv_cq)
            attr->recv_cq = id.pub.recv_cq ? id.pub.recv_cq : attr->send_cq;
    }
    ibv_qp *qp = ibv_create_qp_ex(id.pub.verbs, attr);
    if (!qp) {
        int err = errno ? errno : ENOMEM;
        if (made_cqs)
            destroy_cqs(id);
        return fail(err);
    }
    if (int err = qp_to_init(id, qp)) {
        ibv_destroy_qp(qp);
        if (made_cqs)
            destroy_cqs(id);
        return fail(err);
    }
    id.pub.qp = qp;
    id.pub.qp_type = attr->qp_type;
    return 0;
}

int rdma_create_qp(rdma_cm_id *id, ibv_pd *pd, ibv_qp_init_attr *qp_init_attr)
{
    if (!id || !qp_init_attr)
        return fail(EINVAL);
    ibv_qp_init_attr_ex ex{};
    memcpy(&ex, qp_init_attr, sizeof(*qp_init_attr));
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = pd ? pd : id->pd;
    if (!ex.pd)
        return fail(EINVAL);
    int ret = rdma_create_qp_ex(id, &ex);
    if (ret == 0) {
        // As librdmacm: the caller sees the CQs and capabilities the QP got.
        qp_init_attr->send_cq = ex.send_cq;
        qp_init_attr->recv_cq = ex.recv_cq;
        qp_init_attr->srq = ex.srq;
        qp_init_attr->cap = ex.cap;
    }
    return ret;
}

void rdma_destroy_qp(rdma_cm_id *cid)
{
    if (!cid)
        return;
    auto &id = *reinterpret_cast<Id *>(cid);
    std::lock_guard lk(global().mu);
    if (id.pub.qp) {
        for (auto &mc : id.mcast)
            if (mc.attached) {
                ibv_detach_mcast(id.pub.qp, &mc.mgid, mc.mlid);
                mc.attached = false;
            }
        ibv_destroy_qp(id.pub.qp);
        id.pub.qp = nullptr;
    }
    if (!id.pub.srq)
        destroy_cqs(id);
}

int rdma_create_srq_ex(rdma_cm_id *cid, ibv_srq_init_attr_ex *attr)
{
    if (!cid || !attr)
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    std::lock_guard lk(global().mu);
    if (!id.pub.verbs || id.pub.srq)
        return fail(EINVAL);
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)) {
        attr->srq_type = IBV_SRQT_BASIC;
        attr->comp_mask |= IBV_SRQ_INIT_ATTR_TYPE;
    }
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
        attr->pd = id.pub.pd;
        attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    }
    bool made_cqs = false;
    if (attr->srq_type == IBV_SRQT_XRC && (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq)) {
        if (int err = create_cqs(id, 0, std::max(attr->attr.max_wr, 1u)))
            return fail(err);
        made_cqs = true;
        attr->cq = id.pub.recv_cq;
        attr->comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
    }
    ibv_srq *srq = ibv_create_srq_ex(id.pub.verbs, attr);
    if (!srq) {
        int err = errno ? errno : ENOMEM;
        if (made_cqs)
            destroy_cqs(id);
        return fail(err);
    }
    id.pub.srq = srq;
    return 0;
}

int rdma_create_srq(rdma_cm_id *id, ibv_pd *pd, ibv_srq_init_attr *attr)
{
    if (!id || !attr)
        return fail(EINVAL);
    ibv_srq_init_attr_ex ex{};
    ex.srq_context = attr->srq_context;
    ex.attr = attr->attr;
    ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    ex.srq_type = IBV_SRQT_BASIC;
    ex.pd = pd ? pd : id->pd;
    int ret = rdma_create_srq_ex(id, &ex);
    if (ret == 0)
        attr->attr = ex.attr;
    return ret;
}

void rdma_destroy_srq(rdma_cm_id *cid)
{
    if (!cid)
        return;
    auto &id = *reinterpret_cast<Id *>(cid);
    std::lock_guard lk(global().mu);
    if (id.pub.srq) {
        ibv_destroy_srq(id.pub.srq);
        id.pub.srq = nullptr;
    }
    if (!id.pub.qp)
        destroy_cqs(id);
}

int rdma_init_qp_attr(rdma_cm_id *cid, ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
    if (!cid || !qp_attr || !qp_attr_mask)
        return fail(EINVAL);
    std::lock_guard lk(global().mu);
    int err = fill_init_qp_attr(*reinterpret_cast<Id *>(cid), *qp_attr, *qp_attr_mask);
    return err ? fail(err) : 0;
}

} // extern "C"
