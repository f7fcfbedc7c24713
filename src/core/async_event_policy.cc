// SPDX-License-Identifier: BSD-3-Clause
#include "async_event_policy.h"

namespace xrc {
namespace {

std::string qp_what(const EventSubject &s) {
    return std::string(ibv_event_type_str(s.type)) + " on " + describe_qp(s.qp_num, s.role);
}

std::uint32_t peer_of(const QpRole &role) noexcept {
    switch (role.kind) {
        case QpRole::Kind::ini:
        case QpRole::Kind::tgt_owned:
            return role.rank;
        default:
            return UINT32_MAX;
    }
}

}  // namespace

bool is_port_event(ibv_event_type type) noexcept {
    switch (type) {
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_PKEY_CHANGE:
        case IBV_EVENT_SM_CHANGE:
        case IBV_EVENT_CLIENT_REREGISTER:
        case IBV_EVENT_GID_CHANGE:
            return true;
        default:
            return false;
    }
}

bool is_qp_event(ibv_event_type type) noexcept {
    switch (type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_COMM_EST:
        case IBV_EVENT_SQ_DRAINED:
        case IBV_EVENT_PATH_MIG:
        case IBV_EVENT_PATH_MIG_ERR:
        case IBV_EVENT_QP_LAST_WQE_REACHED:
            return true;
        default:
            return false;
    }
}

std::string describe_qp(std::uint32_t qp_num, const QpRole &role) {
    const std::string qpn = std::to_string(qp_num);
    switch (role.kind) {
        case QpRole::Kind::ini:
            return "INI QP " + qpn + " toward node " + std::to_string(role.node) + " (through rank " +
                   std::to_string(role.rank) + "'s TGT QP " + std::to_string(role.peer_qpn) + ", generation " +
                   std::to_string(role.generation) + ")";
        case QpRole::Kind::tgt_owned:
            return "TGT QP " + qpn + " made for sender rank " + std::to_string(role.rank) + " on node " +
                   std::to_string(role.node) + " (its INI QP " + std::to_string(role.peer_qpn) + ", generation " +
                   std::to_string(role.generation) + "): that sender's path to every rank of this node";
        case QpRole::Kind::tgt_handle:
            return "TGT QP " + qpn + " (a handle on another local rank's TGT QP, for the sender's INI QP " +
                   std::to_string(role.peer_qpn) + ")";
        case QpRole::Kind::loopback_ini:
            return "the on-node loopback INI QP " + qpn;
        case QpRole::Kind::loopback_tgt:
            return "the on-node loopback TGT QP " + qpn;
        case QpRole::Kind::cm_ud:
            return "the connection manager's UD QP " + qpn;
        case QpRole::Kind::unknown:
            break;
    }
    return "QP " + qpn + " (not held by this port)";
}

EventDecision decide_event(const EventSubject &s, std::uint8_t my_port) {
    EventDecision d;
    const std::string name = ibv_event_type_str(s.type);
    if (is_port_event(s.type) && s.port_num != my_port) {
        d.what = name + " for port " + std::to_string(s.port_num) + " (not this module's)";
        return d;
    }
    switch (s.type) {
        case IBV_EVENT_PORT_ERR:
            d.verdict = EventVerdict::hold;
            d.what = "the port went down: new sends are held until it is active again";
            return d;
        case IBV_EVENT_PORT_ACTIVE:
            d.verdict = EventVerdict::resume;
            d.what = "the port is active";
            return d;
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_CLIENT_REREGISTER:
        case IBV_EVENT_SM_CHANGE:
        case IBV_EVENT_PKEY_CHANGE:
        case IBV_EVENT_GID_CHANGE:
            d.verdict = EventVerdict::requery;
            d.what = name;
            return d;
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_PATH_MIG_ERR:
            d.what = qp_what(s);
            d.peer_rank = peer_of(s.role);
            // A QP we no longer hold cannot hurt us; one being closed failed its last operations, which the drain
            // reports through their completions if anyone waited for them.
            d.verdict = s.role.kind == QpRole::Kind::unknown ? EventVerdict::note
                        : s.role.closing                     ? EventVerdict::note
                                                             : EventVerdict::fatal;
            // A sender's TGT QP: the sender hears of it from its own completion and decides (a new connection,
            // another rail, or the end of the job, naming what it sent); this side lets the QP go. A request naming
            // an SRQ that left with its dying process is refused so, and must not end a job that survives deaths.
            if (d.verdict == EventVerdict::fatal &&
                (s.role.kind == QpRole::Kind::tgt_owned || s.role.kind == QpRole::Kind::tgt_handle)) {
                d.verdict = EventVerdict::release_tgt;
                d.what +=
                    ": a request from that sender was refused by the responder (invalid request or access "
                    "violation), the shared TGT QP is in the error state; released here, the sender decides";
            }
            return d;
        case IBV_EVENT_QP_LAST_WQE_REACHED:
            d.what = qp_what(s);
            d.peer_rank = peer_of(s.role);
            // Raised when a QP attached to an SRQ leaves service. Expected for one we are closing; for a TGT QP still
            // in use it means the QP entered the error state: that sender can no longer reach this node.
            if ((s.role.kind == QpRole::Kind::tgt_owned || s.role.kind == QpRole::Kind::tgt_handle) &&
                !s.role.closing) {
                d.verdict = EventVerdict::release_tgt;
                d.what += ": the TGT QP left service (error state); released here, the sender decides";
            } else if (s.role.kind == QpRole::Kind::loopback_tgt && !s.role.closing) {
                d.verdict = EventVerdict::fatal;
                d.what += ": the TGT QP left service (error state)";
            }
            return d;
        case IBV_EVENT_CQ_ERR:
            d.verdict = EventVerdict::fatal;
            d.lost_work = true;
            d.what =
                "the completion queue overran (CQ_ERR): completions were discarded, among them messages whose "
                "senders were told they arrived and sends whose owners will never hear: the job cannot go on "
                "(no other rail knows what to send again)";
            return d;
        case IBV_EVENT_SRQ_ERR:
            d.verdict = EventVerdict::fatal;
            d.what = "a shared receive queue failed (SRQ_ERR): messages to this process can no longer be received";
            return d;
        case IBV_EVENT_DEVICE_FATAL:
            d.verdict = EventVerdict::lose_rail;
            d.what = "the device reported a fatal error (DEVICE_FATAL)";
            return d;
        case IBV_EVENT_SRQ_LIMIT_REACHED:
            d.verdict = EventVerdict::rearm_srq;
            d.what = name;
            return d;
        case IBV_EVENT_COMM_EST:
        case IBV_EVENT_SQ_DRAINED:
        case IBV_EVENT_PATH_MIG:
        default:
            d.what = s.qp_num != 0 ? qp_what(s) : name;
            return d;
    }
}

AsyncEventRecord record_event(const ibv_async_event &event) noexcept {
    AsyncEventRecord record;
    record.type = event.event_type;
    if (is_port_event(event.event_type)) {
        record.port_num = static_cast<std::uint8_t>(event.element.port_num);
    } else if (is_qp_event(event.event_type)) {
        if (event.element.qp != nullptr) record.qp_num = event.element.qp->qp_num;
    } else if (event.event_type == IBV_EVENT_CQ_ERR) {
        record.cq = event.element.cq;
    } else if (event.event_type == IBV_EVENT_SRQ_LIMIT_REACHED || event.event_type == IBV_EVENT_SRQ_ERR) {
        if (event.element.srq != nullptr) record.srq_context = event.element.srq->srq_context;
    }
    return record;
}

}  // namespace xrc
