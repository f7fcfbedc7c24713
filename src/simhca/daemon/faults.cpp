// SPDX-License-Identifier: BSD-3-Clause
// Fault injection (simhca-ctl fault ...): port state, flaps, LID changes and speeds per port; every
// asynchronous event on a chosen QP, CQ, SRQ or port; lost and late traffic toward a node; the device's end.
// What each fault does and which real behaviour it follows: docs/faults-model.md.
#include <cerrno>
#include <cstring>
#include <string>

#include "clock.hpp"
#include "device.hpp"
#include "network.hpp"

namespace simhca {

namespace {

struct EventName {
    const char *name;
    ibv_event_type type;
    char target;  // 'q' QP, 'c' CQ, 's' SRQ, 'p' port, 'd' device
};
constexpr EventName kEvents[] = {
    {"CQ_ERR", IBV_EVENT_CQ_ERR, 'c'},
    {"QP_FATAL", IBV_EVENT_QP_FATAL, 'q'},
    {"QP_REQ_ERR", IBV_EVENT_QP_REQ_ERR, 'q'},
    {"QP_ACCESS_ERR", IBV_EVENT_QP_ACCESS_ERR, 'q'},
    {"COMM_EST", IBV_EVENT_COMM_EST, 'q'},
    {"SQ_DRAINED", IBV_EVENT_SQ_DRAINED, 'q'},
    {"PATH_MIG", IBV_EVENT_PATH_MIG, 'q'},
    {"PATH_MIG_ERR", IBV_EVENT_PATH_MIG_ERR, 'q'},
    {"QP_LAST_WQE_REACHED", IBV_EVENT_QP_LAST_WQE_REACHED, 'q'},
    {"SRQ_ERR", IBV_EVENT_SRQ_ERR, 's'},
    {"SRQ_LIMIT_REACHED", IBV_EVENT_SRQ_LIMIT_REACHED, 's'},
    {"PORT_ACTIVE", IBV_EVENT_PORT_ACTIVE, 'p'},
    {"PORT_ERR", IBV_EVENT_PORT_ERR, 'p'},
    {"LID_CHANGE", IBV_EVENT_LID_CHANGE, 'p'},
    {"PKEY_CHANGE", IBV_EVENT_PKEY_CHANGE, 'p'},
    {"SM_CHANGE", IBV_EVENT_SM_CHANGE, 'p'},
    {"CLIENT_REREGISTER", IBV_EVENT_CLIENT_REREGISTER, 'p'},
    {"GID_CHANGE", IBV_EVENT_GID_CHANGE, 'p'},
    {"DEVICE_FATAL", IBV_EVENT_DEVICE_FATAL, 'd'},
};

}  // namespace

bool Device::selects(const proto::FaultReq &q, const Port &p) {
    return (q.device < 0 || uint32_t(q.device) == p.device) && (q.port == 0 || q.port == p.port_num);
}

void Device::set_port_state(Port &p, ibv_port_state st, bool announce) {
    p.flap_up_ns = 0;
    if (st == IBV_PORT_ACTIVE) p.ack_drop = false;  // a link that comes up again is a new one
    if (p.state == st) return;
    p.state = st;
    (void)write_port_files(objs_.sysfs_dir(p.device), p);
    // Only the event: QPs stay in their state and their requesters retry until the link is back or the retry
    // budget is spent, as mlx4/mlx5 do on a link down (docs/faults-model.md).
    if (announce) objs_.broadcast_port_event(p, st == IBV_PORT_ACTIVE ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR);
}

uint64_t Device::flap_due_ns() const {
    uint64_t best = 0;
    for (const Port &p : objs_.ports)
        if (p.flap_up_ns && (!best || p.flap_up_ns < best)) best = p.flap_up_ns;
    return best;
}

void Device::on_flap_timers(uint64_t now) {
    for (Port &p : objs_.ports)
        if (p.flap_up_ns && p.flap_up_ns <= now) set_port_state(p, IBV_PORT_ACTIVE);
}

int Device::fault_event(const proto::FaultReq &q) {
    std::string name(q.arg, strnlen(q.arg, sizeof(q.arg)));
    if (name.rfind("IBV_EVENT_", 0) == 0) name = name.substr(10);
    const EventName *ev = nullptr;
    for (const auto &e : kEvents)
        if (name == e.name) ev = &e;
    if (!ev) return EINVAL;
    switch (ev->target) {
        case 'q': {
            Qp *qp = objs_.qp_by_num(q.number);
            if (!qp) return ENOENT;
            // The affiliated errors mean the HCA moved the QP to the error state (mlx5: WQ_CATAS, WQ_INVAL_REQ,
            // WQ_ACCESS): the event first, then the flush (and LAST_WQE_REACHED on an SRQ or TGT QP).
            objs_.qp_event(*qp, ev->type);
            if (ev->type == IBV_EVENT_QP_FATAL || ev->type == IBV_EVENT_QP_REQ_ERR ||
                ev->type == IBV_EVENT_QP_ACCESS_ERR)
                if (qp->state != IBV_QPS_RESET && qp->state != IBV_QPS_ERR) completer_.qp_to_error(*qp);
            return 0;
        }
        case 'c': {
            auto it = objs_.cqs.find(q.number);
            if (it == objs_.cqs.end()) return ENOENT;
            Cq &cq = *it->second;
            if (objs_.post_async(cq.owner, ev->type, cq.cookie)) cq.async_events++;
            return 0;
        }
        case 's': {
            Srq *srq = objs_.srq_by_num(q.number);
            if (!srq) return ENOENT;
            if (objs_.post_async(srq->owner, ev->type, srq->cookie)) srq->async_events++;
            return 0;
        }
        case 'p': {
            bool any = false;
            for (const Port &p : objs_.ports)
                if (selects(q, p)) objs_.broadcast_port_event(p, ev->type), any = true;
            return any ? 0 : ENOENT;
        }
        default:
            for (auto &[id, c] : objs_.clients)
                if (!c->is_ctl && !c->alias_of && (q.device < 0 || uint32_t(q.device) == c->device))
                    objs_.post_async(c.get(), ev->type, 0);
            return 0;
    }
}

int Device::do_fault(const proto::FaultReq &q) {
    std::string what(q.what, strnlen(q.what, sizeof(q.what)));
    if (q.device >= int32_t(objs_.cfg.devices) || q.port > objs_.cfg.ports) return ENODEV;
    if (what == "port-down" || what == "port-up" || what == "port-up-quiet" || what == "port-down-quiet" ||
        what == "flap") {
        if (what == "flap" && (q.ms == 0 || q.ms > 3600 * 1000)) return EINVAL;
        for (Port &p : objs_.ports) {
            if (!selects(q, p) || !p.lid) continue;  // a rail without a LID has no link to bring up
            // port-up-quiet, port-down-quiet: the link comes back or goes, but its PORT_ACTIVE or PORT_ERR never
            // reaches the processes (an event lost, or read so late that a process must ask the port itself, or
            // learn it from its requests running out of their retry budget); sysfs and ibv_query_port tell the
            // truth.
            set_port_state(p, what == "port-up" || what == "port-up-quiet" ? IBV_PORT_ACTIVE : IBV_PORT_DOWN,
                           what != "port-up-quiet" && what != "port-down-quiet");
            if (what == "flap") p.flap_up_ns = now_ns() + uint64_t(q.ms) * 1000000ull;
        }
        return 0;
    }
    if (what == "ack-drop" || what == "ack-restore") {
        // The link dies between a request's data and its answer: from now on every request still crosses the
        // port both ways and is handled where it arrives (a SEND delivered, a WRITE placed, an atomic executed),
        // but no answer crosses it (Completer::on_remote_reply, Responder::answer_lost). Reliable requesters on
        // both sides retransmit, the responders answer the duplicates from their replay record (never executing
        // them twice), those answers are lost too, and the requesters end with RETRY_EXC_ERR and a flush, as
        // after a real link loss; a `port-down` meanwhile makes it the plain link loss. Until `ack-restore` or the
        // port comes up again.
        for (Port &p : objs_.ports)
            if (selects(q, p) && p.lid) p.ack_drop = what == "ack-drop";
        return 0;
    }
    if (what == "lid") {
        // The subnet manager gave the port a new LID (LID_CHANGE) and updated every node's routes: the new
        // LID leads here from everywhere, the old one to nobody (docs/faults-model.md).
        if (q.port == 0 || q.number == 0 || q.number >= 0xc000) return EINVAL;
        const uint16_t lid = uint16_t(q.number);
        for (Port &p : objs_.ports) {
            if (!selects(q, p) || (q.device < 0 && p.device != 0) || p.lid == lid) continue;
            for (const Port &o : objs_.ports)
                if (&o != &p && o.lid == lid) return EADDRINUSE;  // LIDs are distinct on one node
            if (net_ && !net_->change_lid(p.fabric, p.lid, lid)) return EADDRINUSE;
            p.lid = lid;
            (void)write_port_files(objs_.sysfs_dir(p.device), p);
            objs_.broadcast_port_event(p, IBV_EVENT_LID_CHANGE);
        }
        return 0;
    }
    if (what == "client-reregister" || what == "sm-change" || what == "pkey-change" || what == "gid-change") {
        const ibv_event_type t = what == "client-reregister" ? IBV_EVENT_CLIENT_REREGISTER
                                 : what == "sm-change"       ? IBV_EVENT_SM_CHANGE
                                 : what == "pkey-change"     ? IBV_EVENT_PKEY_CHANGE
                                                             : IBV_EVENT_GID_CHANGE;
        for (const Port &p : objs_.ports)
            if (selects(q, p)) objs_.broadcast_port_event(p, t);
        return 0;
    }
    if (what == "speed") {
        // ibv_port_attr encodings: speed 1 SDR .. 128 NDR, width 1 (1X), 2 (4X), 4 (8X), 8 (12X), 16 (2X).
        auto bit = [](uint32_t v, uint32_t max) { return v && v <= max && (v & (v - 1)) == 0; };
        if ((q.number && !bit(q.number, 128)) || (q.value && !bit(q.value, 16))) return EINVAL;
        for (Port &p : objs_.ports)
            if (selects(q, p)) {
                if (q.number) p.active_speed = uint8_t(q.number);
                if (q.value) p.active_width = uint8_t(q.value);
                (void)write_port_files(objs_.sysfs_dir(p.device), p);
            }
        return 0;
    }
    if (what == "event") return fault_event(q);
    if (what == "misroute" || what == "bad-rkey") {
        // A request the responder must refuse (class C: the TGT QP or RC responder goes to ERR and raises
        // QP_REQ_ERR / QP_ACCESS_ERR on every handle; the requester gets the NAK): the sender's next SEND names
        // an SRQ outside the TGT QP's XRC domain, or its next RDMA or atomic an rkey nobody has.
        Qp *qp = objs_.qp_by_num(q.number);
        if (!qp || !qp->owner || qp->type == IBV_QPT_UD) return ENOENT;
        if (what == "misroute" && qp->type != IBV_QPT_XRC_SEND) return EINVAL;
        qp->forge = what == "misroute" ? Qp::Forge::misroute : Qp::Forge::bad_rkey;
        qp->forge_srqn = q.value ? q.value & 0xffffff : 0xffffff;
        return 0;
    }
    if (what == "drop" || what == "restore" || what == "delay" || what == "undelay") {
        // drop: everything to and from that node is lost (until restored): the
        // reliable transports then run into their ACK timeouts and retries.
        // delay: it arrives `ms` late each way; restore clears both.
        std::string node(q.arg, strnlen(q.arg, sizeof(q.arg)));
        if (what == "delay" && (q.ms == 0 || q.ms > 3600 * 1000)) return EINVAL;
        if (!net_) return ENOENT;
        bool known = what == "delay"     ? net_->set_delay(node, q.ms)
                     : what == "undelay" ? net_->set_delay(node, 0)
                                         : net_->set_dropped(node, what == "drop");
        if (known && what == "restore") net_->set_delay(node, 0);
        return known ? 0 : ENOENT;
    }
    if (what == "stop") {
        for (auto &[id, c] : objs_.clients)
            if (!c->is_ctl) objs_.post_async(c.get(), IBV_EVENT_DEVICE_FATAL, 0);
        stop_requested = true;
        return 0;
    }
    return EINVAL;
}

}  // namespace simhca
