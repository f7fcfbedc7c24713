// SPDX-License-Identifier: BSD-3-Clause
// The ibv_cq_ex polling interface (start_poll / next_poll / end_poll and
// the read_* accessors) over the same shared CQ ring.
#include <cerrno>

#include "lib.hpp"

namespace simhca::lib {

namespace {
Cq *of(ibv_cq_ex *c) { return reinterpret_cast<Cq *>(c); }

void load(Cq *cq) {
    cq->cur = &cq->ring[cq->tail & (cq->entries - 1)];
    cq->cq.wr_id = cq->cur->wr_id;
    cq->cq.status = ibv_wc_status(cq->cur->status);
}

int start_poll(ibv_cq_ex *c, ibv_poll_cq_attr *attr) {
    if (attr && attr->comp_mask) return EINVAL;
    Cq *cq = of(c);
    cq->mu.lock();
    if (cq->tail == cq->ctl->ring.head.load(std::memory_order_acquire)) {
        cq->mu.unlock(); // ENOENT: end_poll must not be called
        return ENOENT;
    }
    load(cq);
    return 0;
}

int next_poll(ibv_cq_ex *c) {
    Cq *cq = of(c);
    ++cq->tail;
    if (cq->tail == cq->ctl->ring.head.load(std::memory_order_acquire)) {
        --cq->tail; // keep the cursor on the last valid entry; end_poll consumes it
        return ENOENT;
    }
    load(cq);
    return 0;
}

void end_poll(ibv_cq_ex *c) {
    Cq *cq = of(c);
    ++cq->tail;
    cq->ctl->ring.tail.store(cq->tail, std::memory_order_release);
    cq->cur = nullptr;
    cq->mu.unlock();
}

ibv_wc_opcode read_opcode(ibv_cq_ex *c) { return ibv_wc_opcode(of(c)->cur->opcode); }
uint32_t read_vendor_err(ibv_cq_ex *c) { return of(c)->cur->vendor_err; }
uint32_t read_byte_len(ibv_cq_ex *c) { return of(c)->cur->byte_len; }
__be32 read_imm_data(ibv_cq_ex *c) { return of(c)->cur->imm_data; }
uint32_t read_qp_num(ibv_cq_ex *c) { return of(c)->cur->qp_num; }
uint32_t read_src_qp(ibv_cq_ex *c) { return of(c)->cur->src_qp; }
unsigned int read_wc_flags(ibv_cq_ex *c) { return of(c)->cur->wc_flags; }
uint32_t read_slid(ibv_cq_ex *c) { return of(c)->cur->slid; }
uint8_t read_sl(ibv_cq_ex *c) { return of(c)->cur->sl; }
uint8_t read_dlid_path_bits(ibv_cq_ex *c) { return of(c)->cur->dlid_path_bits; }
// Tag matching: the matched message's TMH tag and app_ctx (zero in every other completion).
void read_tm_info(ibv_cq_ex *c, ibv_wc_tm_info *info) {
    info->tag = of(c)->cur->tm_tag;
    info->priv = of(c)->cur->tm_priv;
}
} // namespace

void init_cq_ex_ops(Cq &cq) noexcept {
    ibv_cq_ex &c = cq.cq;
    c.start_poll = start_poll;
    c.next_poll = next_poll;
    c.end_poll = end_poll;
    c.read_opcode = read_opcode;
    c.read_vendor_err = read_vendor_err;
    c.read_byte_len = read_byte_len;
    c.read_imm_data = read_imm_data;
    c.read_qp_num = read_qp_num;
    c.read_src_qp = read_src_qp;
    c.read_wc_flags = read_wc_flags;
    c.read_slid = read_slid;
    c.read_sl = read_sl;
    c.read_dlid_path_bits = read_dlid_path_bits;
    c.read_tm_info = read_tm_info;
}

} // namespace simhca::lib
