// SPDX-License-Identifier: BSD-3-Clause
// The posting half of the data path: WQEs go straight into the shared rings
// and one doorbell (an eventfd write, no reply) wakes the daemon. There is
// no daemon round trip per work request.
#include <cerrno>
#include <cstring>

#include "lib.hpp"

namespace simhca::lib {

namespace {

bool opcode_ok(ibv_qp_type t, ibv_wr_opcode op) {
    switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM: return true;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return t != IBV_QPT_UD;
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return t != IBV_QPT_UD && t != IBV_QPT_UC;
    case IBV_WR_BIND_MW:
    case IBV_WR_LOCAL_INV:
    case IBV_WR_SEND_WITH_INV: return t != IBV_QPT_UD;
    default: return false;
    }
}

void fill_av(shm::Av &av, const ibv_ah_attr &a) {
    av.dlid = a.dlid;
    av.sl = a.sl;
    av.src_path_bits = a.src_path_bits;
    av.is_global = a.is_global;
    av.port_num = a.port_num;
    av.sgid_index = a.grh.sgid_index;
    av.hop_limit = a.grh.hop_limit;
    std::memcpy(av.dgid, a.grh.dgid.raw, 16);
    av.flow_label = a.grh.flow_label;
    av.traffic_class = a.grh.traffic_class;
}

// Fills one WQE from a work request; returns 0 or the errno to report.
int build_send_wqe(Qp &qp, shm::SendWqe &w, const ibv_send_wr &wr) {
    ibv_qp_type t = qp.qpx.qp_base.qp_type;
    if (!opcode_ok(t, wr.opcode)) return EINVAL;
    if (wr.num_sge < 0 || uint32_t(wr.num_sge) > std::max<uint32_t>(qp.cap.max_send_sge, 1)) return EINVAL;
    w.wr_id = wr.wr_id;
    w.opcode = wr.opcode;
    w.send_flags = wr.send_flags;
    w.imm_data = wr.imm_data;
    w.remote_srqn = t == IBV_QPT_XRC_SEND ? wr.qp_type.xrc.remote_srqn : 0;
    w.remote_addr = 0;
    w.rkey = 0;
    w.compare_add = w.swap = 0;
    switch (wr.opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
        w.remote_addr = wr.wr.rdma.remote_addr;
        w.rkey = wr.wr.rdma.rkey;
        break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        w.remote_addr = wr.wr.atomic.remote_addr;
        w.rkey = wr.wr.atomic.rkey;
        w.compare_add = wr.wr.atomic.compare_add;
        w.swap = wr.wr.atomic.swap;
        break;
    default: break;
    }
    if (wr.opcode == IBV_WR_BIND_MW) {
        // Encoding read by daemon/memory_window.cpp.
        const ibv_mw_bind_info &b = wr.bind_mw.bind_info;
        if (!wr.bind_mw.mw || (!b.mr && b.length)) return EINVAL;
        w.rkey = wr.bind_mw.rkey;
        w.remote_addr = b.addr;
        w.compare_add = b.length;
        w.swap = (uint64_t(b.mr ? b.mr->handle : 0) << 32) | wr.bind_mw.mw->handle;
        w.remote_qkey = b.mw_access_flags;
        w.num_sge = 0;
        w.inline_len = 0;
        return 0;
    }
    if (wr.opcode == IBV_WR_LOCAL_INV || wr.opcode == IBV_WR_SEND_WITH_INV) w.imm_data = wr.invalidate_rkey;
    if (wr.opcode == IBV_WR_LOCAL_INV) {
        w.num_sge = 0;
        w.inline_len = 0;
        return 0;
    }
    if (t == IBV_QPT_UD) {
        if (!wr.wr.ud.ah) return EINVAL;
        fill_av(w.av, reinterpret_cast<Ah *>(wr.wr.ud.ah)->attr);
        w.remote_qpn = wr.wr.ud.remote_qpn;
        w.remote_qkey = wr.wr.ud.remote_qkey;
    }
    bool inl = (wr.send_flags & IBV_SEND_INLINE) &&
               (wr.opcode == IBV_WR_SEND || wr.opcode == IBV_WR_SEND_WITH_IMM || wr.opcode == IBV_WR_RDMA_WRITE ||
                wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
    if (inl) {
        // Inline data is copied now: the buffer may be reused on return.
        size_t total = 0;
        for (int i = 0; i < wr.num_sge; ++i) total += wr.sg_list[i].length;
        if (total > shm::kMaxInline) return EINVAL;
        size_t off = 0;
        for (int i = 0; i < wr.num_sge; ++i) {
            std::memcpy(w.inline_data + off, reinterpret_cast<const void *>(wr.sg_list[i].addr), wr.sg_list[i].length);
            off += wr.sg_list[i].length;
        }
        w.inline_len = uint32_t(total);
        w.num_sge = 0;
    } else {
        w.send_flags &= ~uint32_t(IBV_SEND_INLINE);
        w.inline_len = 0;
        w.num_sge = uint32_t(wr.num_sge);
        for (int i = 0; i < wr.num_sge; ++i)
            w.sge[i] = {wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
    }
    return 0;
}

int post_recv_ring(shm::RingCtl &ctl, shm::RecvWqe *ring, uint32_t entries, uint32_t max_sge, ibv_recv_wr *wr,
                   ibv_recv_wr **bad) {
    uint32_t head = ctl.head.load(std::memory_order_relaxed);
    int err = 0;
    for (; wr; wr = wr->next) {
        if (wr->num_sge < 0 || uint32_t(wr->num_sge) > max_sge) {
            err = EINVAL;
            break;
        }
        if (head - ctl.tail.load(std::memory_order_acquire) >= entries) {
            err = ENOMEM;
            break;
        }
        shm::RecvWqe &w = ring[head & (entries - 1)];
        w.wr_id = wr->wr_id;
        w.num_sge = uint32_t(wr->num_sge);
        for (int i = 0; i < wr->num_sge; ++i) w.sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
        ++head;
    }
    ctl.head.store(head, std::memory_order_release);
    if (err) *bad = wr;
    return err;
}

} // namespace

int post_send(ibv_qp *ibqp, ibv_send_wr *wr, ibv_send_wr **bad) noexcept {
    Qp *qp = qp_of(ibqp);
    // Like the IB spec (and mlx5): no send work before RTS.
    if (!qp->ctl || !qp->sq_entries || ibqp->state == IBV_QPS_RESET || ibqp->state == IBV_QPS_INIT ||
        ibqp->state == IBV_QPS_RTR) {
        *bad = wr;
        return EINVAL;
    }
    std::lock_guard<std::mutex> g(qp->sq_mu);
    shm::RingCtl &ctl = qp->ctl->sq;
    uint32_t head0 = ctl.head.load(std::memory_order_relaxed), head = head0;
    int err = 0;
    for (; wr; wr = wr->next) {
        if (head - ctl.tail.load(std::memory_order_acquire) >= qp->sq_entries) {
            err = ENOMEM;
            break;
        }
        if ((err = build_send_wqe(*qp, qp->sq[head & (qp->sq_entries - 1)], *wr))) break;
        ++head;
    }
    if (head != head0) {
        ctl.head.store(head, std::memory_order_release);
        ring_doorbell_sq(*ctx_of(ibqp->context));
    }
    if (err) *bad = wr;
    return err;
}

int post_recv(ibv_qp *ibqp, ibv_recv_wr *wr, ibv_recv_wr **bad) noexcept {
    Qp *qp = qp_of(ibqp);
    if (!qp->ctl || !qp->rq_entries || ibqp->state == IBV_QPS_RESET) {
        *bad = wr;
        return EINVAL;
    }
    std::lock_guard<std::mutex> g(qp->rq_mu);
    int err = post_recv_ring(qp->ctl->rq, qp->rq, qp->rq_entries, std::max<uint32_t>(qp->cap.max_recv_sge, 1), wr, bad);
    // A QP in ERR flushes new receives at once; the daemon needs a nudge.
    if (qp->ctl->in_error.load(std::memory_order_acquire)) ring_doorbell(*ctx_of(ibqp->context));
    return err;
}

int post_srq_recv(ibv_srq *ibsrq, ibv_recv_wr *wr, ibv_recv_wr **bad) noexcept {
    auto *s = reinterpret_cast<Srq *>(ibsrq);
    std::lock_guard<std::mutex> g(s->mu);
    return post_recv_ring(s->ctl->rq, s->ring, s->entries, s->max_sge, wr, bad);
}

} // namespace simhca::lib
