// SPDX-License-Identifier: BSD-3-Clause
// Control verbs for QPs: create / open (XRC TGT handles) / modify / query /
// destroy. A TGT QP belongs to its XRCD, not to a process: every process
// reaches it through a QpHandle and the last handle destroys it.
#include <cerrno>
#include <cstring>

#include "../common/limits.hpp"
#include "device.hpp"
#include "qp_transitions.hpp"

namespace simhca {

using namespace proto;

int Device::do_create_qp(Client &c, const CreateQpReq &q, Response &r, std::vector<int> &fds) {
    if (objs_.qps.size() >= limits::kMaxQp) return ENOMEM;
    ibv_qp_type type = ibv_qp_type(q.type);
    if (type != IBV_QPT_RC && type != IBV_QPT_UC && type != IBV_QPT_UD && type != IBV_QPT_XRC_SEND &&
        type != IBV_QPT_XRC_RECV)
        return EOPNOTSUPP;
    ibv_qp_cap cap = q.cap;
    if (cap.max_send_wr > limits::kMaxQpWr || cap.max_recv_wr > limits::kMaxQpWr ||
        cap.max_send_sge > limits::kMaxSge || cap.max_recv_sge > limits::kMaxSge ||
        cap.max_inline_data > limits::kMaxInline)
        return EINVAL;
    auto qp = std::make_unique<Qp>();
    qp->type = type;
    Pd *pd = nullptr;
    Cq *scq = nullptr, *rcq = nullptr;
    Srq *srq = nullptr;
    Xrcd *x = nullptr;
    if (type == IBV_QPT_XRC_RECV) {
        x = objs_.xrcd_of_handle(c, q.xrcd);
        if (!x) return EINVAL;
        cap = {};  // a TGT QP has no queues of its own
    } else {
        pd = objs_.owned(objs_.pds, c, q.pd);
        scq = objs_.owned(objs_.cqs, c, q.send_cq);
        if (!pd || !scq) return EINVAL;
        if (type == IBV_QPT_XRC_SEND) {
            cap.max_recv_wr = cap.max_recv_sge = 0;
        } else {
            rcq = objs_.owned(objs_.cqs, c, q.recv_cq);
            if (!rcq) return EINVAL;
            if (q.srq) {
                srq = objs_.owned(objs_.srqs, c, q.srq);
                // A TM SRQ serves RC QPs only (IBV_TM_CAP_RC).
                if (!srq || (srq->type != IBV_SRQT_BASIC && !(srq->type == IBV_SRQT_TM && type == IBV_QPT_RC)))
                    return EINVAL;
                cap.max_recv_wr = cap.max_recv_sge = 0;
            }
        }
        qp->sq_entries = shm::round_up_pow2(std::max<uint32_t>(cap.max_send_wr, 1));
        qp->rq_entries =
            (type == IBV_QPT_XRC_SEND || srq) ? 0 : shm::round_up_pow2(std::max<uint32_t>(cap.max_recv_wr, 1));
        if (int e = qp->shm.create("simhca-qp", shm::qp_region_size(qp->sq_entries, qp->rq_entries))) return e;
        char *base = static_cast<char *>(qp->shm.data());
        qp->ctl = reinterpret_cast<shm::QpCtl *>(base);
        qp->sq = reinterpret_cast<shm::SendWqe *>(base + shm::kQpSqOffset);
        qp->rq = reinterpret_cast<shm::RecvWqe *>(base + shm::qp_rq_offset(qp->sq_entries));
        cap.max_send_wr = qp->sq_entries;
        if (qp->rq_entries) cap.max_recv_wr = qp->rq_entries;
        cap.max_send_sge = std::max<uint32_t>(cap.max_send_sge, 1);
        if (qp->rq_entries) cap.max_recv_sge = std::max<uint32_t>(cap.max_recv_sge, 1);
    }
    do {
        objs_.next_qpn = (objs_.next_qpn + 1) & 0xffffff;
    } while (objs_.next_qpn < 2 || objs_.qps.count(objs_.next_qpn));
    qp->qpn = objs_.next_qpn;
    qp->owner = type == IBV_QPT_XRC_RECV ? nullptr : &c;
    qp->pd = pd ? pd->id : 0;
    qp->send_cq = scq ? scq->id : 0;
    qp->recv_cq = rcq ? rcq->id : 0;
    qp->srq = srq ? srq->id : 0;
    qp->xrcd = x ? x->id : 0;
    qp->sq_sig_all = q.sq_sig_all != 0;
    qp->cap = cap;
    qp->attr.qp_state = IBV_QPS_RESET;
    qp->attr.path_mtu = IBV_MTU_4096;
    qp->attr.port_num = 1;
    qp->rail = objs_.rail_of(c.device, 1);
    if (pd) pd->users++;
    if (scq) scq->users++;
    if (rcq) rcq->users++;
    if (srq) srq->users++;
    if (x) x->usecnt++;
    auto h = std::make_unique<QpHandle>(QpHandle{objs_.new_id(), &c, qp->qpn, 0, 0});
    h->cookie = h->id;
    qp->handles.push_back(h->id);
    r.create_qp = {h->id, qp->qpn, qp->sq_entries, qp->rq_entries, cap};
    if (qp->ctl) fds = {qp->shm.fd()};
    objs_.qp_handles[h->id] = std::move(h);
    if (qp->owner) c.qpns.push_back(qp->qpn);
    objs_.qps[qp->qpn] = std::move(qp);
    return 0;
}

int Device::do_open_qp(Client &c, const OpenQpReq &q, Response &r) {
    if (q.type != IBV_QPT_XRC_RECV) return EINVAL;
    Xrcd *x = objs_.xrcd_of_handle(c, q.xrcd);
    Qp *qp = objs_.qp_by_num(q.qpn);
    if (!x || !qp || qp->type != IBV_QPT_XRC_RECV || qp->xrcd != x->id) return EINVAL;
    auto h = std::make_unique<QpHandle>(QpHandle{objs_.new_id(), &c, qp->qpn, 0, 0});
    h->cookie = h->id;
    qp->handles.push_back(h->id);
    r.create_qp.handle = h->id;
    r.create_qp.qpn = qp->qpn;
    objs_.qp_handles[h->id] = std::move(h);
    return 0;
}

static bool attrs_in_range(const ibv_qp_attr &a, int mask, uint32_t ports) {
    if ((mask & IBV_QP_PORT) && (a.port_num < 1 || a.port_num > ports)) return false;
    if ((mask & IBV_QP_PKEY_INDEX) && a.pkey_index >= 128) return false;
    if ((mask & IBV_QP_PATH_MTU) && (a.path_mtu < IBV_MTU_256 || a.path_mtu > IBV_MTU_4096)) return false;
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a.max_rd_atomic > limits::kMaxQpRdAtom) return false;
    if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a.max_dest_rd_atomic > limits::kMaxQpRdAtom) return false;
    if ((mask & IBV_QP_MIN_RNR_TIMER) && a.min_rnr_timer > 31) return false;
    if ((mask & IBV_QP_TIMEOUT) && a.timeout > 31) return false;
    if ((mask & IBV_QP_RETRY_CNT) && a.retry_cnt > 7) return false;
    if ((mask & IBV_QP_RNR_RETRY) && a.rnr_retry > 7) return false;
    if ((mask & IBV_QP_AV) && a.ah_attr.port_num > ports) return false;
    if ((mask & IBV_QP_DEST_QPN) && a.dest_qp_num > 0xffffff) return false;
    if ((mask & IBV_QP_ALT_PATH) && (a.alt_port_num < 1 || a.alt_port_num > ports || a.alt_timeout > 31 ||
                                     a.alt_pkey_index >= 128 || a.alt_ah_attr.port_num > ports))
        return false;
    if ((mask & IBV_QP_PATH_MIG_STATE) && a.path_mig_state != IBV_MIG_MIGRATED && a.path_mig_state != IBV_MIG_REARM &&
        a.path_mig_state != IBV_MIG_ARMED)
        return false;
    return true;
}

// Automatic path migration, software side (the IB spec's software-controlled migration; what the kernel's
// CM does on a LAP): the consumer loads an alternate path and asks for REARM; the HCA arms it once the
// peer's packets say it is armed too, which this HCA, with no path to probe, does at once (ARMED). Then
// MIGRATED, in RTS only and only from ARMED, makes the alternate path the primary one. MIGRATED leaving
// RTR is the state every QP starts in and changes nothing. Arming with no alternate path is refused.
static bool path_migration_ok(ibv_qp_state cur, const ibv_qp_attr &s, const ibv_qp_attr &a, int mask, bool have_alt) {
    if (!(mask & IBV_QP_PATH_MIG_STATE)) return true;
    if (a.path_mig_state == IBV_MIG_MIGRATED) return cur != IBV_QPS_RTS || s.path_mig_state == IBV_MIG_ARMED;
    return have_alt;
}

int Device::do_modify_qp(Client &c, const ModifyQpReq &q) {
    auto hit = objs_.qp_handles.find(q.handle);
    if (hit == objs_.qp_handles.end() || hit->second->owner != &c) return EINVAL;
    Qp *qp = objs_.qp_by_num(hit->second->qpn);
    if (!qp) return EINVAL;
    const ibv_qp_attr &a = q.attr;
    // Like the kernel's uverbs modify_qp_mask(): attributes that mean nothing
    // for an XRC half are dropped before the table check (perftest and
    // rdma-core's own examples set them), so they are accepted and ignored.
    int mask = q.mask;
    if (qp->type == IBV_QPT_XRC_SEND) mask &= ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (qp->type == IBV_QPT_XRC_RECV) mask &= ~(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
    ibv_qp_state cur = (mask & IBV_QP_CUR_STATE) ? a.cur_qp_state : qp->state;
    ibv_qp_state next = (mask & IBV_QP_STATE) ? a.qp_state : cur;
    if (!modify_qp_is_ok(cur, next, qp->type, mask)) return EINVAL;
    if (!attrs_in_range(a, mask, objs_.cfg.ports)) return EINVAL;
    ibv_qp_attr &s = qp->attr;
    if (!path_migration_ok(cur, s, a, mask, qp->has_alt_path || (mask & IBV_QP_ALT_PATH))) return EINVAL;
    if (mask & IBV_QP_PKEY_INDEX) s.pkey_index = a.pkey_index;
    // Traffic leaves and arrives through the QP's port: IBV_QP_PORT, else the address vector's port.
    if (mask & IBV_QP_PORT)
        s.port_num = a.port_num;
    else if ((mask & IBV_QP_AV) && a.ah_attr.port_num)
        s.port_num = a.ah_attr.port_num;
    qp->rail = objs_.rail_of(c.device, s.port_num);
    if (mask & IBV_QP_QKEY) s.qkey = a.qkey;
    if (mask & IBV_QP_ACCESS_FLAGS) s.qp_access_flags = a.qp_access_flags;
    if (mask & IBV_QP_AV) s.ah_attr = a.ah_attr;
    if (mask & IBV_QP_ALT_PATH) {
        s.alt_ah_attr = a.alt_ah_attr;
        s.alt_pkey_index = a.alt_pkey_index;
        s.alt_port_num = a.alt_port_num;
        s.alt_timeout = a.alt_timeout;
        qp->has_alt_path = true;
    }
    if (mask & IBV_QP_PATH_MTU) s.path_mtu = a.path_mtu;
    if (mask & IBV_QP_DEST_QPN) s.dest_qp_num = a.dest_qp_num;
    if (mask & IBV_QP_RQ_PSN) s.rq_psn = a.rq_psn & 0xffffff;
    if (mask & IBV_QP_SQ_PSN) s.sq_psn = a.sq_psn & 0xffffff;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) s.max_dest_rd_atomic = a.max_dest_rd_atomic;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) s.max_rd_atomic = a.max_rd_atomic;
    if (mask & IBV_QP_MIN_RNR_TIMER) s.min_rnr_timer = a.min_rnr_timer;
    if (mask & IBV_QP_TIMEOUT) s.timeout = a.timeout;
    if (mask & IBV_QP_RETRY_CNT) s.retry_cnt = a.retry_cnt;
    if (mask & IBV_QP_RNR_RETRY) s.rnr_retry = a.rnr_retry;
    if (mask & IBV_QP_PATH_MIG_STATE) {
        if (a.path_mig_state == IBV_MIG_MIGRATED && s.path_mig_state == IBV_MIG_ARMED) {
            // The swap: from here on requests leave with the alternate path's DLID and port and the
            // responder checks arriving packets against it; work requests not yet answered are resent on it
            // (the requester reads the path each time it sends).
            s.ah_attr = s.alt_ah_attr;
            s.port_num = s.alt_port_num;
            s.pkey_index = s.alt_pkey_index;
            s.timeout = s.alt_timeout;
            qp->rail = objs_.rail_of(c.device, s.port_num);
            qp->has_alt_path = false;
        }
        s.path_mig_state = a.path_mig_state == IBV_MIG_MIGRATED ? IBV_MIG_MIGRATED : IBV_MIG_ARMED;
    }
    if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) s.en_sqd_async_notify = a.en_sqd_async_notify;

    ibv_qp_state old = qp->state;
    qp->state = next;
    s.qp_state = next;
    s.cur_qp_state = next;
    if (next == IBV_QPS_RESET) {
        // Reset discards all outstanding work, like the hardware does.
        qp->pending.clear();
        qp->retry_at_ns = 0;
        completer_.forget_inflight(*qp);
        qp->rstream = qp->expected = 0;
        qp->last_wqe_sent = false;
        qp->has_alt_path = false;
        s.path_mig_state = IBV_MIG_MIGRATED;
        if (qp->ctl) {
            qp->ctl->sq.tail.store(qp->ctl->sq.head.load(std::memory_order_acquire), std::memory_order_release);
            qp->ctl->rq.tail.store(qp->ctl->rq.head.load(std::memory_order_acquire), std::memory_order_release);
            qp->ctl->in_error.store(0, std::memory_order_release);
        }
    } else if (next == IBV_QPS_ERR && old != IBV_QPS_ERR) {
        completer_.qp_to_error(*qp);
    } else if (next == IBV_QPS_RTS) {
        qp->counters_loaded = false;
        if (old != IBV_QPS_RTS && old != IBV_QPS_SQD) {
            // A new connection epoch: the peer resynchronises on it.
            qp->stream = requester_.new_stream();
            qp->head_seq = 1;
        }
        requester_.pull_sq(*qp);
    }
    return 0;
}

int Device::do_query_qp(Client &c, uint32_t h, Response &r) {
    auto hit = objs_.qp_handles.find(h);
    if (hit == objs_.qp_handles.end() || hit->second->owner != &c) return EINVAL;
    Qp *qp = objs_.qp_by_num(hit->second->qpn);
    if (!qp) return EINVAL;
    r.query_qp.attr = qp->attr;
    r.query_qp.attr.qp_state = qp->state;
    r.query_qp.attr.cur_qp_state = qp->state;
    r.query_qp.attr.cap = qp->cap;
    r.query_qp.cap = qp->cap;
    r.query_qp.sq_sig_all = qp->sq_sig_all;
    return 0;
}

void Device::destroy_qp_object(uint32_t qpn) {
    Qp *qp = objs_.qp_by_num(qpn);
    if (!qp) return;
    if (auto it = objs_.pds.find(qp->pd); it != objs_.pds.end()) it->second->users--;
    if (auto it = objs_.cqs.find(qp->send_cq); it != objs_.cqs.end()) it->second->users--;
    if (auto it = objs_.cqs.find(qp->recv_cq); it != objs_.cqs.end()) it->second->users--;
    if (auto it = objs_.srqs.find(qp->srq); it != objs_.srqs.end()) it->second->users--;
    if (qp->xrcd) xrcd_put(qp->xrcd);
    if (qp->owner) std::erase(qp->owner->qpns, qpn);
    mcast_forget_qp(qpn);  // like uverbs, destroying a QP detaches it from its groups
    completer_.forget_inflight(*qp);
    if (qp->srq) completer_.tm_drop_qp(*qp);  // a rendezvous of a TM SRQ in progress
    completer_.forget_timer(qpn);
    objs_.qps.erase(qpn);
}

int Device::do_destroy_qp(Client &c, uint32_t h, Response &r) {
    auto hit = objs_.qp_handles.find(h);
    if (hit == objs_.qp_handles.end() || hit->second->owner != &c) return EINVAL;
    uint32_t qpn = hit->second->qpn;
    r.destroyed = {0, hit->second->async_events};
    objs_.qp_handles.erase(hit);
    Qp *qp = objs_.qp_by_num(qpn);
    if (!qp) return 0;
    std::erase(qp->handles, h);
    if (qp->handles.empty()) destroy_qp_object(qpn);
    return 0;
}

}  // namespace simhca
