// SPDX-License-Identifier: BSD-3-Clause
// Hardware tag matching on TM SRQs (rdma-core's tag_matching.md, mlx5 as
// the reference): the tag list operations of ibv_post_srq_ops, and what the
// responder does with a SEND that reaches an RC QP attached to a TM SRQ.
//   - TMH opcode EAGER / RNDV whose tag matches a listed, eligible tagged
//     buffer ((msg tag & mask) == (tag & mask), oldest first): EAGER places
//     the payload after the 16-byte TMH in the buffer, one TM_RECV completion
//     with MATCH | DATA_VALID. RNDV completes TM_RECV with MATCH at once,
//     then the QP's own send queue RDMA READs the sender's buffer (RVH: va,
//     rkey, len) into the tagged buffer, completes TM_RECV with DATA_VALID and
//     sends the sender a FIN (its TMH and RVH with opcode FIN).
//   - no match: unexpected. The whole message goes to an ordinary SRQ
//     receive, TM_RECV without flags, and the hardware's unexpected count
//     grows; tags added until software reports that count (IBV_OPS_TM_SYNC)
//     do not match.
//   - NO_TAG: the whole message to an ordinary receive, TM_NO_TAG.
//   - shorter than a TMH, FIN or an unknown opcode: a plain receive (RECV),
//     so a malformed header never reaches the matching logic.
// One feature, three roles: the list operations are control verbs (Device::do_tm_op), matching and the
// start of a rendezvous belong to the Responder, the rendezvous' completions to the Completer.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <endian.h>

#include <infiniband/tm_types.h>

#include "clock.hpp"
#include "completer.hpp"
#include "device.hpp"
#include "responder.hpp"

namespace simhca {

using namespace shm;

namespace {

constexpr size_t kTmhSize = sizeof(ibv_tmh);                        // 16
constexpr size_t kRndvHdrSize = sizeof(ibv_tmh) + sizeof(ibv_rvh);  // 32
static_assert(kTmhSize == 16 && kRndvHdrSize == 32);

uint64_t load_be64(const uint8_t *p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return be64toh(v);
}
uint32_t load_be32(const uint8_t *p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return be32toh(v);
}

// The bytes of `m` from `off` on, as a message of its own (same source).
Message tail_of(const Message &m, size_t off, std::vector<iovec> &iov) {
    Message t = m;
    t.size = m.size - off;
    if (m.data) {
        t.data = m.data + off;
        return t;
    }
    iov.clear();
    size_t pos = 0;
    for (const iovec &v : *m.src_iov) {
        size_t end = pos + v.iov_len;
        if (end > off) {
            size_t skip = pos < off ? off - pos : 0;
            iov.push_back({static_cast<char *>(v.iov_base) + skip, v.iov_len - skip});
        }
        pos = end;
    }
    t.src_iov = &iov;
    return t;
}

uint32_t sge_total(const TaggedBuffer &b) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < b.num_sge; ++i) n += b.sge[i].length;
    return uint32_t(std::min<uint64_t>(n, UINT32_MAX));
}

void unlist(TagMatching &tm, uint32_t handle) {
    auto it = std::find(tm.order.begin(), tm.order.end(), handle);
    if (it != tm.order.end()) tm.order.erase(it);
}

}  // namespace

int Device::do_tm_op(Client &c, const proto::TmOpReq &q, proto::Response &r) {
    Srq *s = objs_.owned(objs_.srqs, c, q.srq);
    if (!s || !s->tm) return EINVAL;  // as mlx5: only a TM SRQ has a command queue
    TagMatching &tm = *s->tm;
    if (q.opcode != IBV_WR_TAG_ADD && q.opcode != IBV_WR_TAG_DEL && q.opcode != IBV_WR_TAG_SYNC) return EINVAL;
    if (q.opcode == IBV_WR_TAG_ADD && q.num_sge > limits::kTmMaxSge) return EINVAL;
    if (q.opcode == IBV_WR_TAG_DEL && q.handle >= tm.slots.size()) return EINVAL;
    uint32_t free_slot = 0;
    if (q.opcode == IBV_WR_TAG_ADD) {
        while (free_slot < tm.slots.size() && tm.slots[free_slot].state != TaggedBuffer::State::Free) ++free_slot;
        if (free_slot == tm.slots.size()) return ENOMEM;  // the matching list is full (mlx5's errno)
    }
    // The reported count comes first: software says it has seen that many
    // unexpected messages with respect to the tags listed now, so once the
    // counts agree every listed tag may match again.
    if (q.flags & IBV_OPS_TM_SYNC) {
        tm.sw_unexpected = uint16_t(q.unexpected_cnt);
        if (tm.in_sync())
            for (uint32_t h : tm.order) tm.slots[h].eligible = true;
    }
    Cqe e{};
    e.wr_id = q.wr_id;
    e.status = IBV_WC_SUCCESS;
    switch (q.opcode) {
        case IBV_WR_TAG_ADD: {
            TaggedBuffer &b = tm.slots[free_slot];
            b = TaggedBuffer{};
            b.state = TaggedBuffer::State::Listed;
            b.eligible = tm.in_sync();
            b.tag = q.tag;
            b.mask = q.mask;
            b.recv_wr_id = q.recv_wr_id;
            b.num_sge = q.num_sge;
            for (uint32_t i = 0; i < q.num_sge; ++i) b.sge[i] = {q.sge[i].addr, q.sge[i].length, q.sge[i].lkey};
            tm.order.push_back(free_slot);
            r.h.handle = free_slot;
            e.opcode = IBV_WC_TM_ADD;
            break;
        }
        case IBV_WR_TAG_DEL: {
            TaggedBuffer &b = tm.slots[q.handle];
            // A tag a message consumed (or one never added) cannot be removed:
            // the operation completes with IBV_WC_TM_ERR, signaled or not.
            if (b.state == TaggedBuffer::State::Listed) {
                unlist(tm, q.handle);
                b = TaggedBuffer{};
            } else {
                e.status = IBV_WC_TM_ERR;
            }
            e.opcode = IBV_WC_TM_DEL;
            break;
        }
        default:
            e.opcode = IBV_WC_TM_SYNC;
    }
    if (!tm.in_sync()) e.wc_flags |= IBV_WC_TM_SYNC_REQ;
    if ((q.flags & IBV_OPS_SIGNALED) || e.status != IBV_WC_SUCCESS) completer_.post_cqe(s->cq, e, false);
    return 0;
}

RespStatus Responder::tm_deliver(Qp &t, Srq &srq, const Message &m) {
    TagMatching &tm = *srq.tm;
    uint8_t hdr[kRndvHdrSize] = {};
    size_t hdr_len = std::min(m.size, kRndvHdrSize);
    if (m.size < kTmhSize || dma_.copy_src(m, 0, hdr, hdr_len)) return deliver_recv(t, &srq, m);
    uint8_t op = hdr[0];
    if (op == IBV_TMH_NO_TAG) return deliver_recv(t, &srq, m, IBV_WC_TM_NO_TAG);
    if (op != IBV_TMH_EAGER && op != IBV_TMH_RNDV) return deliver_recv(t, &srq, m);
    uint64_t tag = load_be64(hdr + offsetof(ibv_tmh, tag));
    uint32_t app_ctx = load_be32(hdr + offsetof(ibv_tmh, app_ctx));
    bool rndv = op == IBV_TMH_RNDV;

    auto hit = tm.order.end();
    if (!rndv || m.size >= kRndvHdrSize)  // a rendezvous request without its RVH is left to software
        hit = std::find_if(tm.order.begin(), tm.order.end(), [&](uint32_t h) {
            const TaggedBuffer &b = tm.slots[h];
            return b.eligible && (tag & b.mask) == (b.tag & b.mask);
        });
    if (hit == tm.order.end()) {
        // Unexpected: software gets all of it, headers included.
        if (!recv_available(t, &srq)) return RespStatus::RnrNak;
        tm.hw_unexpected++;
        return deliver_recv(t, &srq, m, IBV_WC_TM_RECV);
    }
    uint32_t handle = *hit;
    tm.order.erase(hit);
    TaggedBuffer &b = tm.slots[handle];

    Cqe e{};
    e.wr_id = b.recv_wr_id;
    e.opcode = IBV_WC_TM_RECV;
    e.qp_num = t.qpn;
    e.src_qp = m.src_qpn;
    e.slid = m.src_lid;
    e.tm_tag = tag;
    e.tm_priv = app_ctx;
    e.wc_flags = IBV_WC_TM_MATCH;
    if (m.has_imm) {
        e.imm_data = m.imm;
        e.wc_flags |= IBV_WC_WITH_IMM;
    }
    if (rndv) {
        uint32_t len = load_be32(hdr + sizeof(ibv_tmh) + offsetof(ibv_rvh, len));
        e.byte_len = len;
        if (len > sge_total(b)) {
            // The buffer cannot hold the data: software resumes the rendezvous
            // from the headers, which go into the tagged buffer.
            e.status =
                dma_.scatter(*srq.owner, srq.pd, b.sge, b.num_sge, hdr, std::min<size_t>(kRndvHdrSize, sge_total(b)));
            if (e.status == IBV_WC_SUCCESS) e.status = IBV_WC_TM_RNDV_INCOMPLETE;
            b = TaggedBuffer{};
            comp_.post_cqe(srq.cq, e, m.solicited);
            return RespStatus::Ack;
        }
        e.status = IBV_WC_SUCCESS;
        comp_.post_cqe(srq.cq, e, m.solicited);
        tm_start_rendezvous(t, srq, handle, hdr, kRndvHdrSize);
        return RespStatus::Ack;
    }
    std::vector<iovec> iov;
    Message payload = tail_of(m, kTmhSize, iov);
    e.byte_len = uint32_t(payload.size);
    e.wc_flags |= IBV_WC_TM_DATA_VALID;
    e.status = dma_.scatter_msg(*srq.owner, srq.pd, b.sge, b.num_sge, payload, payload.size, 0);
    b = TaggedBuffer{};
    comp_.post_cqe(srq.cq, e, m.solicited);
    if (e.status == IBV_WC_SUCCESS) return RespStatus::Ack;
    // As for an ordinary receive: a buffer too small or a bad key ends the connection.
    comp_.qp_to_error(t);
    return e.status == IBV_WC_LOC_LEN_ERR ? RespStatus::RemInvReq : RespStatus::RemOp;
}

// The responder's HCA does the rendezvous with the QP's own send queue (the
// TM SRQ owns it, tag_matching.md): an RDMA READ of the sender's buffer into
// the tagged buffer, then the FIN. Both run through the ordinary requester
// path, so they work to a peer on another node as well; their completions
// come back through tm_internal_done().
void Responder::tm_start_rendezvous(Qp &t, Srq &srq, uint32_t handle, const uint8_t *hdr, size_t hdr_len) {
    TagMatching &tm = *srq.tm;
    TaggedBuffer &b = tm.slots[handle];
    b.state = TaggedBuffer::State::Rendezvous;
    b.cookie = tm.next_cookie++;
    if (!tm.next_cookie) tm.next_cookie = 1;
    const uint8_t *rvh = hdr + sizeof(ibv_tmh);
    uint32_t len = load_be32(rvh + offsetof(ibv_rvh, len));

    SendWqe rd{};
    rd.wr_id = (uint64_t(handle) << 32) | b.cookie;
    rd.opcode = IBV_WR_RDMA_READ;
    rd.send_flags = kTmInternalWqe;
    rd.remote_addr = load_be64(rvh + offsetof(ibv_rvh, va));
    rd.rkey = load_be32(rvh + offsetof(ibv_rvh, rkey));
    // Exactly `len` bytes of the tagged buffer (it holds at least that many).
    uint32_t left = len;
    for (uint32_t i = 0; i < b.num_sge && left; ++i) {
        rd.sge[rd.num_sge] = b.sge[i];
        rd.sge[rd.num_sge].length = std::min(left, b.sge[i].length);
        left -= rd.sge[rd.num_sge++].length;
    }

    SendWqe fin{};
    fin.wr_id = rd.wr_id;
    fin.opcode = IBV_WR_SEND;
    fin.send_flags = kTmInternalWqe | IBV_SEND_INLINE;
    fin.inline_len = uint32_t(hdr_len);
    std::memcpy(fin.inline_data, hdr, hdr_len);
    fin.inline_data[0] = IBV_TMH_FIN;

    bool was_idle = t.pending.empty() && !t.retry_at_ns && !t.sent;
    t.pending.push_back(rd);
    t.pending.push_back(fin);
    // Not from here (we are inside the sender's request): the completer's timer
    // pass starts the QP on its next turn.
    if (was_idle) {
        t.retry_at_ns = now_ns();
        comp_.arm_timer(t.qpn);
    }
}

bool Completer::tm_internal_done(Qp &qp, const SendWqe &w, ibv_wc_status st) {
    auto it = objs_.srqs.find(qp.srq);
    if (it == objs_.srqs.end() || !it->second->tm) return false;
    Srq &srq = *it->second;
    TagMatching &tm = *srq.tm;
    uint32_t handle = uint32_t(w.wr_id >> 32);
    // Only our own WQEs name a busy slot with its current cookie; anything
    // else (a client setting the flag itself) completes as usual.
    if (handle >= tm.slots.size() || tm.slots[handle].cookie != uint32_t(w.wr_id)) return false;
    TaggedBuffer &b = tm.slots[handle];
    bool read = w.opcode == IBV_WR_RDMA_READ;
    if (read ? b.state != TaggedBuffer::State::Rendezvous : b.state != TaggedBuffer::State::Finishing) return false;
    if (!read) {  // the FIN: the rendezvous is over (a failed FIN ends the QP, which reports it)
        b = TaggedBuffer{};
        return true;
    }
    Cqe e{};
    e.wr_id = b.recv_wr_id;
    e.status = st;
    e.opcode = IBV_WC_TM_RECV;
    e.qp_num = qp.qpn;
    e.src_qp = qp.attr.dest_qp_num;
    e.wc_flags = st == IBV_WC_SUCCESS ? IBV_WC_TM_DATA_VALID : 0;
    for (uint32_t i = 0; i < std::min(w.num_sge, kMaxSge); ++i) e.byte_len += w.sge[i].length;
    b.state = TaggedBuffer::State::Finishing;
    post_cqe(srq.cq, e, false);
    return true;
}

// A QP destroyed in the middle of a rendezvous: its tagged buffers will not
// be filled; they complete with a flush error and their slots are free again.
void Completer::tm_drop_qp(Qp &qp) {
    for (const SendWqe &w : qp.pending)
        if (w.send_flags & kTmInternalWqe) tm_internal_done(qp, w, IBV_WC_WR_FLUSH_ERR);
}

}  // namespace simhca
