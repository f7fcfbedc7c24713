// SPDX-License-Identifier: BSD-3-Clause
// The ibv_qp_ex work-request builder (ibv_wr_start ... ibv_wr_complete):
// the same WQE ring as ibv_post_send, filled one call at a time; the
// producer index is published (and the doorbell rung) only on complete.
#include <cerrno>
#include <cstring>

#include "lib.hpp"

namespace simhca::lib {

namespace {
Qp *of(ibv_qp_ex *q) { return reinterpret_cast<Qp *>(q); }

void start(ibv_qp_ex *q) {
    Qp *qp = of(q);
    qp->sq_mu.lock();
    qp->wr_head = qp->ctl ? qp->ctl->sq.head.load(std::memory_order_relaxed) : 0;
    qp->wr_err = qp->ctl ? 0 : EINVAL;
    qp->wr_cur = nullptr;
}

// Opens a new WQE with the opcode; later setters fill address and data.
void begin(ibv_qp_ex *q, ibv_wr_opcode op) {
    Qp *qp = of(q);
    if (qp->wr_err) return;
    if (qp->wr_head - qp->ctl->sq.tail.load(std::memory_order_acquire) >= qp->sq_entries) {
        qp->wr_err = ENOMEM;
        return;
    }
    shm::SendWqe &w = qp->sq[qp->wr_head & (qp->sq_entries - 1)];
    std::memset(&w, 0, shm::kSendHdrSize);
    w.wr_id = q->wr_id;
    w.opcode = op;
    w.send_flags = q->wr_flags & ~uint32_t(IBV_SEND_INLINE);
    qp->wr_cur = &w;
    ++qp->wr_head;
}

shm::SendWqe *cur(ibv_qp_ex *q) { return of(q)->wr_err ? nullptr : of(q)->wr_cur; }

void send(ibv_qp_ex *q) { begin(q, IBV_WR_SEND); }
void send_imm(ibv_qp_ex *q, __be32 imm) {
    begin(q, IBV_WR_SEND_WITH_IMM);
    if (auto *w = cur(q)) w->imm_data = imm;
}
void rdma(ibv_qp_ex *q, ibv_wr_opcode op, uint32_t rkey, uint64_t addr) {
    begin(q, op);
    if (auto *w = cur(q)) w->rkey = rkey, w->remote_addr = addr;
}
void rdma_write(ibv_qp_ex *q, uint32_t rkey, uint64_t addr) { rdma(q, IBV_WR_RDMA_WRITE, rkey, addr); }
void rdma_write_imm(ibv_qp_ex *q, uint32_t rkey, uint64_t addr, __be32 imm) {
    rdma(q, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr);
    if (auto *w = cur(q)) w->imm_data = imm;
}
void rdma_read(ibv_qp_ex *q, uint32_t rkey, uint64_t addr) { rdma(q, IBV_WR_RDMA_READ, rkey, addr); }
void cmp_swp(ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
    rdma(q, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr);
    if (auto *w = cur(q)) w->compare_add = compare, w->swap = swap;
}
void fetch_add(ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t add) {
    rdma(q, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr);
    if (auto *w = cur(q)) w->compare_add = add;
}
void set_sge(ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t length) {
    if (auto *w = cur(q); w && w->opcode != IBV_WR_ATOMIC_WRITE) {
        w->num_sge = 1;
        w->sge[0] = {addr, length, lkey};
    }
}
void set_sge_list(ibv_qp_ex *q, size_t n, const ibv_sge *sg) {
    auto *w = cur(q);
    if (!w) return;
    if (n > std::max<uint32_t>(of(q)->cap.max_send_sge, 1)) {
        of(q)->wr_err = EINVAL;
        return;
    }
    w->num_sge = uint32_t(n);
    for (size_t i = 0; i < n; ++i) w->sge[i] = {sg[i].addr, sg[i].length, sg[i].lkey};
}
void set_inline_list(ibv_qp_ex *q, size_t n, const ibv_data_buf *bufs) {
    auto *w = cur(q);
    if (!w) return;
    size_t total = 0;
    for (size_t i = 0; i < n; ++i) total += bufs[i].length;
    if (total > shm::kMaxInline) {
        of(q)->wr_err = EINVAL;
        return;
    }
    size_t off = 0;
    for (size_t i = 0; i < n; ++i) {
        std::memcpy(w->inline_data + off, bufs[i].addr, bufs[i].length);
        off += bufs[i].length;
    }
    w->inline_len = uint32_t(total);
    w->num_sge = 0;
    w->send_flags |= IBV_SEND_INLINE;
}
void set_inline(ibv_qp_ex *q, void *addr, size_t length) {
    ibv_data_buf b{addr, length};
    set_inline_list(q, 1, &b);
}
void set_ud_addr(ibv_qp_ex *q, ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey) {
    auto *w = cur(q);
    if (!w) return;
    const ibv_ah_attr &a = reinterpret_cast<Ah *>(ah)->attr;
    w->av.dlid = a.dlid;
    w->av.sl = a.sl;
    w->av.is_global = a.is_global;
    w->av.port_num = a.port_num;
    w->av.hop_limit = a.grh.hop_limit;
    w->av.traffic_class = a.grh.traffic_class;
    w->av.flow_label = a.grh.flow_label;
    std::memcpy(w->av.dgid, a.grh.dgid.raw, 16);
    w->remote_qpn = remote_qpn;
    w->remote_qkey = remote_qkey;
}
void set_xrc_srqn(ibv_qp_ex *q, uint32_t srqn) {
    if (auto *w = cur(q)) w->remote_srqn = srqn;
}
int complete(ibv_qp_ex *q) {
    Qp *qp = of(q);
    int err = qp->wr_err;
    ibv_qp_state st = q->qp_base.state;
    if (!err && (st == IBV_QPS_RESET || st == IBV_QPS_INIT || st == IBV_QPS_RTR)) err = EINVAL;
    if (!err && qp->ctl) {
        uint32_t old = qp->ctl->sq.head.load(std::memory_order_relaxed);
        qp->ctl->sq.head.store(qp->wr_head, std::memory_order_release);
        if (qp->wr_head != old) ring_doorbell_sq(*ctx_of(q->qp_base.context));
    }
    qp->wr_cur = nullptr;
    qp->sq_mu.unlock();
    return err;
}
void abort_wr(ibv_qp_ex *q) {
    Qp *qp = of(q);
    qp->wr_cur = nullptr;
    qp->sq_mu.unlock();
}
// Operations this HCA does not offer: creation with these send_ops_flags
// fails with EOPNOTSUPP, and a stray call only poisons the batch.
void unsupported(ibv_qp_ex *q) { of(q)->wr_err = EOPNOTSUPP; }
void bind_mw(ibv_qp_ex *q, ibv_mw *mw, uint32_t rkey, const ibv_mw_bind_info *b) {
    begin(q, IBV_WR_BIND_MW);
    auto *w = cur(q);
    if (!w) return;
    if (!mw || !b || (!b->mr && b->length)) {
        of(q)->wr_err = EINVAL;
        return;
    }
    w->rkey = rkey; // same encoding as ibv_post_send's (lib/post.cpp)
    w->remote_addr = b->addr;
    w->compare_add = b->length;
    w->swap = (uint64_t(b->mr ? b->mr->handle : 0) << 32) | mw->handle;
    w->remote_qkey = b->mw_access_flags;
}
void local_inv(ibv_qp_ex *q, uint32_t rkey) {
    begin(q, IBV_WR_LOCAL_INV);
    if (auto *w = cur(q)) w->imm_data = rkey;
}
void send_inv(ibv_qp_ex *q, uint32_t rkey) {
    begin(q, IBV_WR_SEND_WITH_INV);
    if (auto *w = cur(q)) w->imm_data = rkey;
}
void send_tso(ibv_qp_ex *q, void *, uint16_t, uint16_t) { unsupported(q); }
// 8 bytes written atomically at the responder; the value travels inline.
void atomic_write(ibv_qp_ex *q, uint32_t rkey, uint64_t addr, const void *value) {
    rdma(q, IBV_WR_ATOMIC_WRITE, rkey, addr);
    if (auto *w = cur(q)) {
        std::memcpy(w->inline_data, value, 8);
        w->inline_len = 8;
        w->num_sge = 0;
        w->send_flags |= IBV_SEND_INLINE;
    }
}
} // namespace

void init_qp_ex_ops(Qp &qp) noexcept {
    ibv_qp_ex &q = qp.qpx;
    q.comp_mask = 0;
    q.wr_start = start;
    q.wr_complete = complete;
    q.wr_abort = abort_wr;
    q.wr_send = send;
    q.wr_send_imm = send_imm;
    q.wr_rdma_write = rdma_write;
    q.wr_rdma_write_imm = rdma_write_imm;
    q.wr_rdma_read = rdma_read;
    q.wr_atomic_cmp_swp = cmp_swp;
    q.wr_atomic_fetch_add = fetch_add;
    q.wr_set_sge = set_sge;
    q.wr_set_sge_list = set_sge_list;
    q.wr_set_inline_data = set_inline;
    q.wr_set_inline_data_list = set_inline_list;
    q.wr_set_ud_addr = set_ud_addr;
    q.wr_set_xrc_srqn = set_xrc_srqn;
    q.wr_bind_mw = bind_mw;
    q.wr_local_inv = local_inv;
    q.wr_send_inv = send_inv;
    q.wr_send_tso = send_tso;
    q.wr_atomic_write = atomic_write;
}

} // namespace simhca::lib
