// SPDX-License-Identifier: BSD-3-Clause
// The responder (responder.hpp): requests -> memory, receives, answers.
#include "responder.hpp"

#include <cstring>

#include "../common/limits.hpp"
#include "completer.hpp"

namespace simhca {

using namespace shm;

namespace {
struct RecvQueue {
    RingCtl *ctl;
    RecvWqe *ring;
    uint32_t entries;
};

RecvQueue queue_of(Qp &t, Srq *srq) {
    if (srq) return {&srq->ctl->rq, srq->ring, srq->entries};
    return {t.ctl ? &t.ctl->rq : nullptr, t.rq, t.rq_entries};
}
}  // namespace

bool Responder::recv_available(Qp &t, Srq *srq) {
    RecvQueue q = queue_of(t, srq);
    if (!q.ctl || !q.entries) return false;
    uint32_t head = q.ctl->head.load(std::memory_order_acquire);
    uint32_t tail = q.ctl->tail.load(std::memory_order_relaxed);
    return head != tail && head - tail <= q.entries;
}

bool Responder::take_recv(Qp &t, Srq *srq, RecvWqe &w) {
    if (!recv_available(t, srq)) return false;
    RecvQueue q = queue_of(t, srq);
    uint32_t head = q.ctl->head.load(std::memory_order_acquire);
    uint32_t tail = q.ctl->tail.load(std::memory_order_relaxed);
    w = q.ring[tail & (q.entries - 1)];
    q.ctl->tail.store(tail + 1, std::memory_order_release);
    if (srq && srq->limit && head - (tail + 1) < srq->limit) {
        // The limit is one-shot: it disarms itself when it fires.
        srq->limit = 0;
        if (objs_.post_async(srq->owner, IBV_EVENT_SRQ_LIMIT_REACHED, srq->cookie)) srq->async_events++;
    }
    return true;
}

// The responder's state machine for one request (rxe_resp.c's states, without the ones of multi-packet
// messages: every Message is a whole one). Each state either moves on or sets the answer and goes to
// Acknowledge; no state allocates.
Reply Responder::respond(const Message &m) {
    Reply rep;
    Qp *t = nullptr;
    Srq *srq = nullptr;
    RespState state = RespState::GetQp;
    while (state != RespState::Done) {
        switch (state) {
            case RespState::GetQp:
                if (m.dst_qpn == limits::kMulticastQpn && m.dlid >= limits::kMcastLidBase) return respond_mcast(m);
                t = objs_.qp_by_num(m.dst_qpn);
                if (!t || (t->state != IBV_QPS_RTR && t->state != IBV_QPS_RTS && t->state != IBV_QPS_SQD)) {
                    rep.status = RespStatus::Drop;  // nobody listens: the requester times out
                    return rep;
                }
                // A packet reaches a QP only through the QP's own port: addressed to that port's LID (another
                // port's LID is another fabric, or another port of it), and only while its link is up.
                if (const Port &p = objs_.ports[t->rail]; p.lid != m.dlid || p.state != IBV_PORT_ACTIVE) {
                    rep.status = RespStatus::Drop;
                    return rep;
                }
                rep.rnr_timer = t->attr.min_rnr_timer;
                state = RespState::CheckRoute;
                break;
            case RespState::CheckRoute:
                state = check_route(*t, m, srq, rep.status) ? RespState::CheckOpValid : RespState::Acknowledge;
                break;
            case RespState::CheckOpValid:
                state = RespState::CheckResource;
                switch (m.opcode) {
                    case IBV_WR_SEND_WITH_INV:
                        if (t->type == IBV_QPT_XRC_RECV || t->type == IBV_QPT_UD) {
                            rep.status = RespStatus::RemInvReq;
                            state = RespState::Acknowledge;
                        }
                        break;
                    case IBV_WR_SEND:
                    case IBV_WR_SEND_WITH_IMM:
                    case IBV_WR_RDMA_WRITE_WITH_IMM:
                    case IBV_WR_RDMA_WRITE:
                    case IBV_WR_RDMA_READ:
                    case IBV_WR_ATOMIC_CMP_AND_SWP:
                    case IBV_WR_ATOMIC_FETCH_AND_ADD:
                    case IBV_WR_ATOMIC_WRITE:
                        break;
                    default:
                        rep.status = RespStatus::RemInvReq;
                        state = RespState::Acknowledge;
                }
                break;
            case RespState::CheckResource:
                // A WRITE with immediate consumes a receive: without one nothing is written (RNR NAK). A SEND
                // looks for its receive when it executes (deliver_recv), after tag matching may have taken it.
                if (m.opcode == IBV_WR_RDMA_WRITE_WITH_IMM && !recv_available(*t, srq)) {
                    rep.status = RespStatus::RnrNak;
                    state = RespState::Acknowledge;
                } else {
                    state = RespState::Execute;
                }
                break;
            case RespState::Execute:
                state = RespState::Acknowledge;
                switch (m.opcode) {
                    case IBV_WR_SEND_WITH_INV:
                    case IBV_WR_SEND:
                    case IBV_WR_SEND_WITH_IMM:
                        // An RC QP on a TM SRQ: the SRQ matches the message's tag first (tag_matching.cpp). A
                        // SEND with invalidate is no TM message (its invalidation needs the ordinary path).
                        rep.status = srq && srq->tm && t->type == IBV_QPT_RC && !m.has_inv ? tm_deliver(*t, *srq, m)
                                                                                           : deliver_recv(*t, srq, m);
                        break;
                    case IBV_WR_RDMA_WRITE_WITH_IMM:
                        // Remote memory first (the rkey checks of rxe's CHK_RKEY are in remote_mem).
                        rep.status = remote_mem(*t, srq, m, rep);
                        if (rep.status == RespStatus::Ack) state = RespState::Complete;
                        break;
                    default:  // RDMA WRITE / READ, atomics
                        rep.status = remote_mem(*t, srq, m, rep);
                }
                break;
            case RespState::Complete:  // the receive completion of a WRITE with immediate
                rep.status = deliver_recv(*t, srq, m);
                state = RespState::Acknowledge;
                break;
            case RespState::Acknowledge:
                // UC has no responses: a missing receive or a bad rkey just loses the message.
                if (t->type == IBV_QPT_UC && rep.status != RespStatus::Ack) rep.status = RespStatus::Drop;
                if (rep.status == RespStatus::RemAccess || rep.status == RespStatus::RemInvReq ||
                    rep.status == RespStatus::RemOp)
                    responder_error(*t, rep.status);
                state = RespState::Done;
                break;
            case RespState::Done:
                break;
        }
    }
    return rep;
}

// A class C error found by the responder of a reliable QP (IB spec 9.9.3.1.3 and o9-30..; rxe_resp.c's
// ERR_* states; mlx5's WQ_ACCESS / WQ_INVAL_REQ / WQ_CATAS): the requester gets the NAK (the caller's
// answer), this QP goes to the error state, and, as nothing of the responder's own is completed for an error
// it found without a receive WQE, the affiliated asynchronous event tells every process holding a handle of the
// QP (for an XRC TGT QP: its creator and every ibv_open_qp holder; docs/faults-model.md). A receive WQE that
// failed already completed with its error and moved the QP (deliver_recv): no event then.
void Responder::responder_error(Qp &t, RespStatus st) {
    if ((t.type != IBV_QPT_RC && t.type != IBV_QPT_XRC_RECV) || t.state == IBV_QPS_ERR) return;
    objs_.qp_event(t, st == RespStatus::RemAccess   ? IBV_EVENT_QP_ACCESS_ERR
                      : st == RespStatus::RemInvReq ? IBV_EVENT_QP_REQ_ERR
                                                    : IBV_EVENT_QP_FATAL);
    comp_.qp_to_error(t);
}

// Whether QP `t` takes this requester's message, and from which SRQ its receives come. False: `st` is the
// answer (a silent drop, or REM_INV_REQ for an XRC SRQ outside the TGT QP's domain).
bool Responder::check_route(Qp &t, const Message &m, Srq *&srq, RespStatus &st) {
    switch (t.type) {
        case IBV_QPT_RC:
        case IBV_QPT_UC:  // connected: only its peer QP
            if (t.attr.dest_qp_num != m.src_qpn || t.attr.ah_attr.dlid != m.src_lid)
                return st = RespStatus::Drop, false;
            if (t.srq) srq = objs_.srqs[t.srq].get();
            return true;
        case IBV_QPT_UD:  // datagrams: SENDs with the QP's Q_Key
            if ((m.opcode != IBV_WR_SEND && m.opcode != IBV_WR_SEND_WITH_IMM) || m.qkey != t.attr.qkey)
                return st = RespStatus::Drop, false;
            if (t.srq) srq = objs_.srqs[t.srq].get();
            return true;
        case IBV_QPT_XRC_RECV:  // connected to one INI QP; the SRQ is the one the message names
            if (t.attr.dest_qp_num != m.src_qpn || t.attr.ah_attr.dlid != m.src_lid)
                return st = RespStatus::Drop, false;
            srq = objs_.srq_by_num(m.srqn);
            // The SRQ must live in the TGT QP's own XRC domain.
            if (!srq || srq->type != IBV_SRQT_XRC || srq->xrcd != t.xrcd) return st = RespStatus::RemInvReq, false;
            return true;
        default:
            return st = RespStatus::Drop, false;
    }
}

// A request from another node. Requests of one requester QP carry a stream (connection epoch) and
// consecutive sequence numbers, like RC PSNs (rxe's CHK_PSN): the expected one is executed; a retransmitted
// older one gets its recorded answer again (never executed twice: DUPLICATE_REQUEST); a newer one is
// discarded (ERR_PSN_OUT_OF_SEQ: an earlier request was NAKed or lost, and the requester will go back to it).
Reply Responder::respond_remote(const Message &m) {
    Qp *t = objs_.qp_by_num(m.dst_qpn);
    // Through a port that is down (or not the QP's) nothing arrives: not even a retransmission that would be
    // answered from the replay record.
    if (t) {
        const Port &p = objs_.ports[t->rail];
        if (p.lid != m.dlid || p.state != IBV_PORT_ACTIVE) {
            Reply r;
            r.status = RespStatus::Drop;
            return r;
        }
    }
    switch (check_psn(t, m)) {
        case PsnCheck::Unsequenced:
            return respond(m);
        case PsnCheck::Duplicate:
            return duplicate(*t, m);
        case PsnCheck::OutOfSequence: {
            Reply r;
            r.status = RespStatus::Discard;
            return r;
        }
        case PsnCheck::Expected:
            break;
    }
    Reply r = respond(m);
    t = objs_.qp_by_num(m.dst_qpn);  // still there?
    if (t && r.status != RespStatus::Drop && r.status != RespStatus::RnrNak) {
        auto &c = t->replay[m.seq % kReplay];
        c.seq = m.seq;
        c.status = int(r.status);
        c.rnr = r.rnr_timer;
        c.data = r.data;  // atomics only (8 bytes); READ data is not kept
        t->expected++;
    }
    return r;
}

bool Responder::answer_lost(const Message &m) const {
    for (const Port &p : objs_.ports)
        if (p.ack_drop && p.lid == m.dlid) {
            const Qp *t = objs_.qp_by_num(m.dst_qpn);
            return simhca::answer_lost(p, t && t->type == IBV_QPT_UC ? IBV_QPT_UC : IBV_QPT_RC);
        }
    return false;
}

Responder::PsnCheck Responder::check_psn(Qp *t, const Message &m) {
    bool sequenced = t && m.stream && (t->type == IBV_QPT_RC || t->type == IBV_QPT_XRC_RECV) &&
                     t->attr.dest_qp_num == m.src_qpn && t->attr.ah_attr.dlid == m.src_lid;
    if (!sequenced) return PsnCheck::Unsequenced;
    if (t->rstream != m.stream) {  // first request of a new epoch: synchronise
        t->rstream = m.stream;
        t->expected = m.seq;
        t->replay.assign(kReplay, {});
    }
    if (m.seq < t->expected) return PsnCheck::Duplicate;
    if (m.seq > t->expected) return PsnCheck::OutOfSequence;
    return PsnCheck::Expected;
}

// A retransmission of a request executed before: its recorded answer again.
Reply Responder::duplicate(Qp &t, const Message &m) {
    Reply r;
    const auto &c = t.replay[m.seq % kReplay];
    // A READ has no side effect: like real responders, execute it again
    // rather than keeping its data.
    if (c.seq == m.seq && m.opcode == IBV_WR_RDMA_READ && c.status == int(RespStatus::Ack)) return respond(m);
    if (c.seq == m.seq) {
        r.status = RespStatus(c.status);
        r.rnr_timer = c.rnr;
        r.data = c.data;
    }  // else: executed long ago, and acknowledged since: a plain ACK
    return r;
}

RespStatus Responder::deliver_recv(Qp &t, Srq *srq, const Message &m, ibv_wc_opcode opcode) {
    bool ud = t.type == IBV_QPT_UD;
    RecvWqe w;
    if (!take_recv(t, srq, w)) return (ud || t.type == IBV_QPT_UC) ? RespStatus::Drop : RespStatus::RnrNak;
    Client *owner = srq ? srq->owner : t.owner;
    uint32_t pd = srq ? srq->pd : t.pd;
    // XRC and TM SRQs have a CQ of their own for every receive completion.
    uint32_t cq = (srq && srq->type != IBV_SRQT_BASIC) ? srq->cq : t.recv_cq;
    bool write_imm = m.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    size_t len = write_imm ? 0 : m.size;

    Cqe e{};
    e.wr_id = w.wr_id;
    e.qp_num = t.qpn;
    e.src_qp = m.src_qpn;
    e.slid = m.src_lid;
    e.opcode = write_imm ? IBV_WC_RECV_RDMA_WITH_IMM : opcode;
    e.byte_len = uint32_t(write_imm ? m.size : len + (ud ? 40 : 0));
    if (m.has_imm) {
        e.imm_data = m.imm;
        e.wc_flags |= IBV_WC_WITH_IMM;
    }
    bool bad_inv = false;
    if (m.has_inv) {
        // The key must name a bound type 2 window of this QP's PD; otherwise
        // the receive fails and the sender gets an invalid-request NAK.
        bad_inv = !invalidate_remote(t, m.imm);
        e.imm_data = m.imm;  // wc.invalidated_rkey
        e.wc_flags |= IBV_WC_WITH_INV;
    }
    ibv_wc_status st = IBV_WC_SUCCESS;
    uint32_t nsge = std::min(w.num_sge, kMaxSge);
    if (w.num_sge > kMaxSge)
        st = IBV_WC_LOC_LEN_ERR;
    else if (!write_imm) {
        if (ud && m.has_grh) {
            e.wc_flags |= IBV_WC_GRH;
            std::vector<uint8_t> tmp(40 + len);
            std::memcpy(tmp.data(), m.grh, 40);
            if (len) std::memcpy(tmp.data() + 40, m.data, len);
            st = dma_.scatter(*owner, pd, w.sge, nsge, tmp.data(), tmp.size());
        } else {
            st = dma_.scatter_msg(*owner, pd, w.sge, nsge, m, len, ud ? 40 : 0);
        }
    }
    if (bad_inv && st == IBV_WC_SUCCESS) st = IBV_WC_LOC_PROT_ERR;
    e.status = st;
    comp_.post_cqe(cq, e, m.solicited);
    if (bad_inv) {
        comp_.qp_to_error(t);
        return RespStatus::RemInvReq;
    }
    if (st == IBV_WC_SUCCESS) return RespStatus::Ack;
    if (ud) return RespStatus::Drop;
    comp_.qp_to_error(t);
    return st == IBV_WC_LOC_LEN_ERR ? RespStatus::RemInvReq : RespStatus::RemOp;
}

RespStatus Responder::remote_mem(Qp &t, Srq *srq, const Message &m, Reply &out) {
    int need_mr, need_qp;
    uint64_t len;
    switch (m.opcode) {
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
            need_mr = need_qp = IBV_ACCESS_REMOTE_WRITE;
            len = m.size;
            break;
        case IBV_WR_RDMA_READ:
            need_mr = need_qp = IBV_ACCESS_REMOTE_READ;
            len = m.length;
            break;
        case IBV_WR_ATOMIC_WRITE:  // an 8-byte aligned write, done as one store
            need_mr = need_qp = IBV_ACCESS_REMOTE_WRITE;
            len = 8;
            if ((m.remote_addr & 7) || m.size != 8) return RespStatus::RemInvReq;
            break;
        default:
            need_mr = need_qp = IBV_ACCESS_REMOTE_ATOMIC;
            len = 8;
            if (m.remote_addr & 7) return RespStatus::RemInvReq;  // misaligned atomic
    }
    if (!(t.attr.qp_access_flags & need_qp)) return RespStatus::RemAccess;
    if (len == 0) return RespStatus::Ack;
    Mr *mr = objs_.mr_by_key(m.rkey);
    uint32_t pd = t.type == IBV_QPT_XRC_RECV ? (srq ? srq->pd : 0) : t.pd;
    if (!mr) {  // a memory window? It narrows its MR's range and rights.
        auto it = objs_.key_to_mw.find(m.rkey);
        if (it == objs_.key_to_mw.end()) return RespStatus::RemAccess;
        Mw &w = *objs_.mws[it->second];
        if (!w.bound || w.pd != pd || !(w.access & need_mr) || (w.type == IBV_MW_TYPE_2 && w.qpn != t.qpn) ||
            m.remote_addr < w.addr || m.remote_addr + len > w.addr + w.length || m.remote_addr + len < m.remote_addr)
            return RespStatus::RemAccess;
        auto mit = objs_.mrs.find(w.mr);
        if (mit == objs_.mrs.end()) return RespStatus::RemAccess;
        mr = mit->second.get();
    } else if (mr->pd != pd || !(mr->access & need_mr) || m.remote_addr < mr->iova ||
               m.remote_addr + len > mr->iova + mr->length || m.remote_addr + len < m.remote_addr) {
        return RespStatus::RemAccess;
    }
    uint64_t host = mr->addr + (m.remote_addr - mr->iova);
    switch (m.opcode) {
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
        case IBV_WR_ATOMIC_WRITE:
            // Real HCAs place a write in increasing address order, and receivers that poll memory (MPI eager-RDMA
            // rings: a sequence number in the last 8 bytes of the message) rely on it: the last word goes last.
            if (dma_.copy_to(*mr, host, m, 0, len, /*tail_last=*/true)) return RespStatus::RemAccess;
            return RespStatus::Ack;
        case IBV_WR_RDMA_READ:
            if (read_cap_ < len) {
                read_buf_.reset(new uint8_t[len]);
                read_cap_ = len;
            }
            if (dma_.mr_read(*mr, host, read_buf_.get(), len)) return RespStatus::RemAccess;
            out.ext = read_buf_.get();
            out.ext_len = len;
            return RespStatus::Ack;
        default: {
            // The daemon is single threaded, so atomics are atomic with respect
            // to every other HCA operation (like a real HCA's atomic unit).
            uint64_t orig;
            if (dma_.mr_read(*mr, host, &orig, 8)) return RespStatus::RemAccess;
            uint64_t nv =
                m.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? (orig == m.compare_add ? m.swap : orig) : orig + m.compare_add;
            if (nv != orig && dma_.mr_write(*mr, host, &nv, 8)) return RespStatus::RemAccess;
            out.data.resize(8);
            std::memcpy(out.data.data(), &orig, 8);
            return RespStatus::Ack;
        }
    }
}

}  // namespace simhca
