// SPDX-License-Identifier: BSD-3-Clause
// The completer (completer.hpp): answers -> completions, retries, errors.
#include "completer.hpp"

#include <algorithm>
#include <unistd.h>

#include "../common/protocol.hpp"
#include "clock.hpp"
#include "requester.hpp"
#include "sysfs.hpp"

namespace simhca {

using namespace shm;

namespace {

// IB spec table of RNR NAK timer values (in units of 10 ns: 0 = 655.36 ms).
uint64_t rnr_delay_ns(uint8_t code) {
    static const uint32_t us100[32] = {65536, 1,    2,    3,    4,    6,     8,     12,    16,    24,   32,
                                       48,    64,   96,   128,  192,  256,   384,   512,   768,   1024, 1536,
                                       2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
    return uint64_t(us100[code & 31]) * 10000ull;  // entries are in units of 10 us
}

ibv_wc_opcode wc_opcode_for(uint32_t wr_opcode) {
    switch (wr_opcode) {
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
            return IBV_WC_RDMA_WRITE;
        case IBV_WR_RDMA_READ:
            return IBV_WC_RDMA_READ;
        case IBV_WR_ATOMIC_CMP_AND_SWP:
            return IBV_WC_COMP_SWAP;
        case IBV_WR_ATOMIC_FETCH_AND_ADD:
            return IBV_WC_FETCH_ADD;
        case IBV_WR_ATOMIC_WRITE:
            return IBV_WC_ATOMIC_WRITE;
        case IBV_WR_BIND_MW:
            return IBV_WC_BIND_MW;
        case IBV_WR_LOCAL_INV:
            return IBV_WC_LOCAL_INV;
        default:
            return IBV_WC_SEND;
    }
}

}  // namespace

void Completer::complete_send(Qp &qp, const SendWqe &w, ibv_wc_status st) {
    if ((w.send_flags & kTmInternalWqe) && tm_internal_done(qp, w, st)) return;  // a TM SRQ's rendezvous
    bool signaled = qp.sq_sig_all || (w.send_flags & IBV_SEND_SIGNALED);
    if (st == IBV_WC_SUCCESS && !signaled) return;
    Cqe e{};
    e.wr_id = w.wr_id;
    e.status = st;
    e.opcode = wc_opcode_for(w.opcode);
    e.qp_num = qp.qpn;
    if (w.opcode == IBV_WR_RDMA_READ) {
        for (uint32_t i = 0; i < std::min(w.num_sge, kMaxSge); ++i) e.byte_len += w.sge[i].length;
    } else if (w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        e.byte_len = 8;
    }
    post_cqe(qp.send_cq, e, false);
}

bool Completer::post_cqe(uint32_t cq_id, const Cqe &e, bool solicited) {
    auto it = objs_.cqs.find(cq_id);
    if (it == objs_.cqs.end()) return false;
    Cq &cq = *it->second;
    uint32_t tail = cq.ctl->ring.tail.load(std::memory_order_acquire);
    if (cq.head - tail >= cq.entries) {
        if (!cq.overflowed) {
            cq.overflowed = true;
            if (objs_.post_async(cq.owner, IBV_EVENT_CQ_ERR, cq.cookie)) cq.async_events++;
        }
        return false;
    }
    cq.ring[cq.head & (cq.entries - 1)] = e;
    cq.head++;
    cq.ctl->ring.head.store(cq.head, std::memory_order_release);
    // Store head, then load armed; the library stores armed, then loads head.
    // Without a full fence both could read the old value and the wakeup would
    // be lost (the classic store/load race).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    uint32_t armed = cq.ctl->armed.load(std::memory_order_acquire);
    if (armed == 1 || (armed == 2 && (solicited || e.status != IBV_WC_SUCCESS))) {
        if (cq.ctl->armed.exchange(0, std::memory_order_acq_rel) != 0 && cq.channel) {
            auto ch = objs_.channels.find(cq.channel);
            if (ch != objs_.channels.end()) {
                proto::CompRecord rec{cq.cookie};
                if (::write(ch->second->wr.get(), &rec, sizeof(rec)) == sizeof(rec)) cq.comp_events++;
            }
        }
    }
    return true;
}

void Completer::qp_to_error(Qp &qp) {
    qp.state = IBV_QPS_ERR;
    qp.attr.qp_state = IBV_QPS_ERR;
    qp.retry_at_ns = 0;
    forget_inflight(qp);  // late replies find no taker
    if (qp.ctl) qp.ctl->in_error.store(1, std::memory_order_release);
    flush_qp(qp);
    if ((qp.srq || qp.type == IBV_QPT_XRC_RECV) && !qp.last_wqe_sent) {
        qp.last_wqe_sent = true;
        objs_.qp_event(qp, IBV_EVENT_QP_LAST_WQE_REACHED);
    }
}

// Everything outstanding completes with IBV_WC_WR_FLUSH_ERR (signaled or not).
void Completer::flush_qp(Qp &qp) {
    if (!qp.ctl) return;
    RingCtl &s = qp.ctl->sq;
    uint32_t head = s.head.load(std::memory_order_acquire), tail = s.tail.load(std::memory_order_relaxed);
    if (head - tail <= qp.sq_entries)
        for (; tail != head; ++tail) qp.pending.push_back(qp.sq[tail & (qp.sq_entries - 1)]);
    s.tail.store(head, std::memory_order_release);
    while (!qp.pending.empty()) {
        complete_send(qp, qp.pending.front(), IBV_WC_WR_FLUSH_ERR);
        qp.pending.pop_front();
    }
    if (qp.rq_entries) {
        RingCtl &r = qp.ctl->rq;
        head = r.head.load(std::memory_order_acquire);
        tail = r.tail.load(std::memory_order_relaxed);
        if (head - tail <= qp.rq_entries) {
            for (; tail != head; ++tail) {
                Cqe e{};
                e.wr_id = qp.rq[tail & (qp.rq_entries - 1)].wr_id;
                e.status = IBV_WC_WR_FLUSH_ERR;
                e.opcode = IBV_WC_RECV;
                e.qp_num = qp.qpn;
                post_cqe(qp.recv_cq, e, false);
            }
        }
        r.tail.store(head, std::memory_order_release);
    }
}

// Applies the responder's answer to the head WQE `w`. Returns false when
// the QP has to wait (retry timer) before anything else can go.
bool Completer::handle_reply(Qp &qp, const SendWqe &w, const Reply &rep) {
    bool unreliable = qp.type == IBV_QPT_UD || qp.type == IBV_QPT_UC;
    auto finish = [&](ibv_wc_status st) {
        if (!qp.pending.empty()) qp.pending.pop_front();
        ++qp.head_seq;
        complete_send(qp, w, st);
        if (st != IBV_WC_SUCCESS) qp_to_error(qp);
    };
    switch (rep.status) {
        case RespStatus::Ack: {
            ibv_wc_status fin = IBV_WC_SUCCESS;
            if (rep.size()) {
                uint32_t n = w.opcode == IBV_WR_RDMA_READ ? std::min(w.num_sge, kMaxSge) : 1;
                fin = dma_.scatter(*qp.owner, qp.pd, w.sge, n, rep.bytes(), rep.size());
            }
            qp.counters_loaded = false;  // forward progress resets the retry budgets
            finish(fin);
            return true;
        }
        case RespStatus::Discard:  // the responder wants an earlier request first: resend
        case RespStatus::Drop:
            if (unreliable) {  // the sender never knows
                finish(IBV_WC_SUCCESS);
                return true;
            }
            if (qp.attr.timeout == 0 || qp.retry_left > 0) {
                // A real requester hears nothing of a dropped request: its ACK timer runs out, then it resends.
                if (qp.attr.timeout) qp.retry_left--;
                qp.retry_at_ns = now_ns() + ack_timeout_ns(qp.attr.timeout);
                timed_.insert(qp.qpn);
                count_ack_timeout(qp);
                return false;
            }
            finish(IBV_WC_RETRY_EXC_ERR);
            return true;
        case RespStatus::RnrNak:
            if (qp.attr.rnr_retry == 7 || qp.rnr_left > 0) {
                if (qp.attr.rnr_retry != 7) qp.rnr_left--;
                qp.retry_at_ns = now_ns() + rnr_delay_ns(rep.rnr_timer);
                timed_.insert(qp.qpn);
                return false;
            }
            finish(IBV_WC_RNR_RETRY_EXC_ERR);
            return true;
        case RespStatus::RemAccess:
            finish(IBV_WC_REM_ACCESS_ERR);
            return true;
        case RespStatus::RemInvReq:
            finish(IBV_WC_REM_INV_REQ_ERR);
            return true;
        case RespStatus::RemOp:
            finish(IBV_WC_REM_OP_ERR);
            return true;
    }
    return true;
}

// Drops every request of this QP that is on the wire: their replies, if
// any arrive, are ignored, and the window restarts at the head.
void Completer::forget_inflight(Qp &qp) {
    for (size_t i = 0; i < qp.tokens.size(); ++i) {
        inflight_.erase(qp.tokens[i]);
        retired_[qp.tokens[i]] = {qp.qpn, qp.stream, qp.head_seq + i};
    }
    while (retired_.size() > 4096) retired_.erase(retired_.begin());  // the oldest tokens
    qp.tokens.clear();
    qp.sent_bytes.clear();
    qp.sent = 0;
    qp.ack_due_ns = 0;
}

// The ACK of an earlier transmission of the head arrived after the ACK timeout
// resent it: like an ACK carrying the head's PSN on real RC, it counts.
void Completer::on_late_reply(uint64_t token, const Reply &r) {
    auto it = retired_.find(token);
    if (it == retired_.end()) return;
    Retired o = it->second;
    retired_.erase(it);
    Qp *qp = objs_.qp_by_num(o.qpn);
    if (r.status != RespStatus::Ack || !qp || qp->state != IBV_QPS_RTS || qp->stream != o.stream ||
        qp->head_seq != o.seq || qp->pending.empty() || answer_lost(objs_.ports[qp->rail], qp->type))
        return;
    if (qp->sent) {  // tokens[0] is the head's retransmission: its answer is a duplicate now
        inflight_.erase(qp->tokens.front());
        qp->tokens.pop_front();
        qp->sent_bytes.pop_front();
        qp->sent--;
    }
    qp->ack_due_ns = qp->sent ? now_ns() + ack_timeout_ns(qp->attr.timeout) : 0;
    qp->retry_at_ns = 0;
    timed_.insert(qp->qpn);
    const SendWqe w = qp->pending.front();
    handle_reply(*qp, w, r);
    req_.progress(*qp);
}

void Completer::on_remote_reply(uint64_t token, const Reply &r) {
    auto it = inflight_.find(token);
    if (it == inflight_.end()) return on_late_reply(token, r);  // or stale: that request was given up
    uint32_t qpn = it->second;
    Qp *qp = objs_.qp_by_num(qpn);
    // An answer for a QP whose port is down, or whose link loses answers (fault ack-drop), is lost on the way:
    // the request times out as on a fabric.
    if (qp && answer_lost(objs_.ports[qp->rail], qp->type)) return;
    inflight_.erase(it);
    if (!qp || qp->tokens.empty() || qp->tokens.front() != token || qp->pending.empty()) return;
    qp->tokens.pop_front();
    qp->sent_bytes.pop_front();
    qp->sent--;
    const SendWqe w = qp->pending.front();
    if (r.status == RespStatus::Ack || qp->type == IBV_QPT_UC) {
        // (UC has no retransmission: whatever the answer, the head is done.)
        qp->ack_due_ns = qp->sent ? now_ns() + ack_timeout_ns(qp->attr.timeout) : 0;
        timed_.insert(qp->qpn);
        handle_reply(*qp, w, r);
    } else {
        // Anything but an ACK for the head: the rest of the window was not
        // executed (the responder discards out-of-sequence requests); go back
        // to the head, after the back-off handle_reply chooses.
        forget_inflight(*qp);
        handle_reply(*qp, w, r);
    }
    req_.progress(*qp);
}

// No reply for the head within the local ACK timeout: resend the window
// (retry_cnt times; 7 is not special for transport retries).
void Completer::on_ack_timeout(Qp &qp) {
    forget_inflight(qp);
    if (qp.pending.empty()) return;
    if (qp.attr.timeout != 0 && qp.retry_left <= 0) {
        const SendWqe w = qp.pending.front();
        qp.pending.pop_front();
        ++qp.head_seq;
        complete_send(qp, w, IBV_WC_RETRY_EXC_ERR);
        qp_to_error(qp);
        return;
    }
    if (qp.attr.timeout) qp.retry_left--;
    count_ack_timeout(qp);
    req_.progress(qp);
}

void Completer::count_ack_timeout(const Qp &qp) {
    Port &p = objs_.ports[qp.rail];
    ++p.counters.local_ack_timeout_err;
    objs_.counters_changed(p);  // a stale file only misleads readers; the count stays
}

void Completer::on_timers(uint64_t now) {
    std::vector<uint32_t> due;
    for (auto it = timed_.begin(); it != timed_.end();) {
        Qp *qp = objs_.qp_by_num(*it);
        if (!qp || (!qp->retry_at_ns && !qp->ack_due_ns)) {
            it = timed_.erase(it);  // nothing armed any more
            continue;
        }
        if ((qp->retry_at_ns && qp->retry_at_ns <= now) || (qp->ack_due_ns && qp->ack_due_ns <= now))
            due.push_back(*it);
        ++it;
    }
    for (uint32_t qpn : due) {
        Qp *qp = objs_.qp_by_num(qpn);
        if (!qp) continue;
        if (qp->ack_due_ns && qp->ack_due_ns <= now) {
            on_ack_timeout(*qp);
        } else {
            // Consume the expired timer here: progress() keeps it when the
            // QP has nothing to send or left RTS, and a timer that stays
            // expired would make epoll_wait return at once, forever.
            qp->retry_at_ns = 0;
            req_.progress(*qp);
        }
    }
}

uint64_t Completer::next_timer_ns() const {
    uint64_t best = 0;
    for (uint32_t qpn : timed_) {
        auto it = objs_.qps.find(qpn);
        if (it == objs_.qps.end()) continue;
        for (uint64_t t : {it->second->retry_at_ns, it->second->ack_due_ns})
            if (t && (!best || t < best)) best = t;
    }
    return best;
}

bool Completer::idle() const {
    return next_timer_ns() == 0;
}

}  // namespace simhca
