// SPDX-License-Identifier: BSD-3-Clause
// The completer (rxe_comp.c, with rxe_cq.c's CQE writer): applies the responder's answer to the head WQE of
// a send queue, in order. ACK: scatter READ / atomic results, complete the WQE. RNR NAK: back off the
// responder's min_rnr_timer, rnr_retry times (7 = forever). No answer (a dropped request, a lost node):
// resend after the local ACK timeout 4.096us*2^timeout, retry_cnt times. NAKs and exhausted retries complete
// the WQE with their status, move the QP to ERR and flush everything outstanding (send and receive) with
// IBV_WC_WR_FLUSH_ERR. It owns the retry / ACK timers and the table of requests on the wire (token -> QP),
// which grows with the requests in flight (at most the requester's window per QP) plus 4096 retired tokens.
#pragma once
#include <cstdint>
#include <map>
#include <set>

#include <infiniband/verbs.h>

#include "../common/shm_layout.hpp"
#include "dma.hpp"
#include "object_table.hpp"
#include "packet.hpp"

namespace simhca {

class Requester;

// Local ACK timeout: 4.096 us * 2^timeout (0 means "infinite": we poll once a second).
inline uint64_t ack_timeout_ns(uint8_t t) {
    if (t == 0) return 1000000000ull;
    if (t > 31) t = 31;
    return 4096ull << t;
}

class Completer {
public:
    Completer(ObjectTable &objs, Dma &dma, Requester &req) : objs_(objs), dma_(dma), req_(req) {}

    // Writes a CQE (false: no such CQ, or it is full: CQ_ERR once); signals an armed CQ's channel.
    bool post_cqe(uint32_t cq_id, const shm::Cqe &e, bool solicited);
    // The send completion of `w` (only when signaled or failed; a TM SRQ's own WQEs go to tag matching).
    void complete_send(Qp &qp, const shm::SendWqe &w, ibv_wc_status st);
    // Applies the responder's answer to the head WQE `w`. Returns false when the QP has to wait (retry
    // timer) before anything else can go.
    bool handle_reply(Qp &qp, const shm::SendWqe &w, const Reply &rep);
    void qp_to_error(Qp &qp);  // ERR, flush, LAST_WQE_REACHED for SRQ-attached and TGT QPs
    void flush_qp(Qp &qp);     // everything outstanding completes with IBV_WC_WR_FLUSH_ERR

    // Requests on the wire: `token` names one for `qpn` until its answer arrives (the network calls
    // on_remote_reply) or forget_inflight() gives the QP's window up.
    void track(uint64_t token, uint32_t qpn) { inflight_[token] = qpn; }
    void forget_inflight(Qp &qp);
    void on_remote_reply(uint64_t token, const Reply &r);

    // Retry and ACK timers (Qp::retry_at_ns, Qp::ack_due_ns) of the QPs in `timed_`.
    void arm_timer(uint32_t qpn) { timed_.insert(qpn); }
    void forget_timer(uint32_t qpn) { timed_.erase(qpn); }
    void on_timers(uint64_t now_ns);
    uint64_t next_timer_ns() const;  // 0 = none
    bool idle() const;

    // tag matching (tag_matching.cpp): completions of a TM SRQ's rendezvous WQEs
    bool tm_internal_done(Qp &qp, const shm::SendWqe &w, ibv_wc_status st);
    void tm_drop_qp(Qp &qp);

private:
    void on_late_reply(uint64_t token, const Reply &r);
    void on_ack_timeout(Qp &qp);
    void count_ack_timeout();  // the requester retransmits after its ACK timer ran out

    ObjectTable &objs_;
    Dma &dma_;
    Requester &req_;
    std::map<uint64_t, uint32_t> inflight_;  // token -> requester QPN
    struct Retired {
        uint32_t qpn;
        uint64_t stream, seq;
    };
    std::map<uint64_t, Retired> retired_;  // tokens given up by an ACK timeout (their late ACKs still count)
    mutable std::set<uint32_t> timed_;     // QPs that may have a retry / ACK timer armed
};

}  // namespace simhca
