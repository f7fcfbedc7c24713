// Inspection (simhca-ctl status / list) and fault injection.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "device.hpp"
#include "network.hpp"

namespace simhca {

namespace {
const char *state_name(ibv_qp_state s) {
    switch (s) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERR";
    default: return "?";
    }
}
const char *type_name(ibv_qp_type t) {
    switch (t) {
    case IBV_QPT_RC: return "RC";
    case IBV_QPT_UD: return "UD";
    case IBV_QPT_XRC_SEND: return "XRC_INI";
    case IBV_QPT_XRC_RECV: return "XRC_TGT";
    default: return "?";
    }
}
} // namespace

int Device::do_status(proto::Response &r, bool json) {
    std::string out;
    char line[256];
    auto add = [&](const char *fmt, auto... a) {
        std::snprintf(line, sizeof(line), fmt, a...);
        out += line;
    };
    size_t nclients = 0;
    for (auto &[id, c] : clients_)
        if (!c->is_ctl) ++nclients;
    if (json) {
        add("{\"node\":\"%s\",\"lid\":%u,\"port\":\"%s\",\"clients\":%zu,\"pds\":%zu,\"mrs\":%zu,\"cqs\":%zu,"
            "\"srqs\":%zu,\"xrcds\":%zu,\"qps\":%zu,\"qp_list\":[",
            cfg.node.c_str(), cfg.lid, port_state == IBV_PORT_ACTIVE ? "ACTIVE" : "DOWN", nclients, pds_.size(),
            mrs_.size(), cqs_.size(), srqs_.size(), xrcds_.size(), qps_.size());
        bool first = true;
        for (auto &[qpn, qp] : qps_) {
            add("%s{\"qpn\":%u,\"type\":\"%s\",\"state\":\"%s\",\"pid\":%d,\"handles\":%zu,\"xrcd\":%u}",
                first ? "" : ",", qpn, type_name(qp->type), state_name(qp->state), qp->owner ? qp->owner->pid : 0,
                qp->handles.size(), qp->xrcd);
            first = false;
            if (out.size() > sizeof(r.status.text) - 300) break;
        }
        add("],\"srq_list\":[");
        first = true;
        for (auto &[id, s] : srqs_) {
            add("%s{\"srqn\":%u,\"type\":\"%s\",\"pid\":%d,\"xrcd\":%u}", first ? "" : ",", s->srqn,
                s->type == IBV_SRQT_XRC ? "XRC" : "BASIC", s->owner->pid, s->xrcd);
            first = false;
            if (out.size() > sizeof(r.status.text) - 300) break;
        }
        add("],\"xrcd_list\":[");
        first = true;
        for (auto &[id, x] : xrcds_) {
            add("%s{\"id\":%u,\"inode\":%lu,\"usecnt\":%d}", first ? "" : ",", id, (unsigned long)x->ino, x->usecnt);
            first = false;
        }
        add("]}\n");
    } else {
        add("node %s lid %u port %s\n", cfg.node.c_str(), cfg.lid, port_state == IBV_PORT_ACTIVE ? "ACTIVE" : "DOWN");
        add("clients %zu pds %zu mrs %zu cqs %zu srqs %zu xrcds %zu qps %zu\n", nclients, pds_.size(), mrs_.size(),
            cqs_.size(), srqs_.size(), xrcds_.size(), qps_.size());
        if (!qps_.empty()) add("%-8s %-8s %-6s %-8s %-7s %s\n", "QPN", "TYPE", "STATE", "PID", "HANDLES", "XRCD");
        for (auto &[qpn, qp] : qps_) {
            add("%-8u %-8s %-6s %-8d %-7zu %u\n", qpn, type_name(qp->type), state_name(qp->state),
                qp->owner ? qp->owner->pid : 0, qp->handles.size(), qp->xrcd);
            if (out.size() > sizeof(r.status.text) - 300) break;
        }
        for (auto &[id, s] : srqs_)
            add("SRQ %u %s pid %d xrcd %u\n", s->srqn, s->type == IBV_SRQT_XRC ? "XRC" : "BASIC", s->owner->pid,
                s->xrcd);
        for (auto &[id, x] : xrcds_) add("XRCD %u inode %lu usecnt %d\n", id, (unsigned long)x->ino, x->usecnt);
    }
    std::snprintf(r.status.text, sizeof(r.status.text), "%s", out.c_str());
    return 0;
}

int Device::do_fault(const proto::FaultReq &q) {
    std::string what(q.what, strnlen(q.what, sizeof(q.what)));
    if (what == "port-down") {
        if (port_state != IBV_PORT_DOWN) {
            port_state = IBV_PORT_DOWN;
            broadcast_port_event(IBV_EVENT_PORT_ERR);
        }
        return 0;
    }
    if (what == "port-up") {
        if (port_state != IBV_PORT_ACTIVE) {
            port_state = IBV_PORT_ACTIVE;
            broadcast_port_event(IBV_EVENT_PORT_ACTIVE);
        }
        return 0;
    }
    if (what == "drop" || what == "restore") {
        // Everything to and from that node is lost (until restored): the
        // reliable transports then run into their ACK timeouts and retries.
        std::string node(q.arg, strnlen(q.arg, sizeof(q.arg)));
        if (!net_ || !net_->set_dropped(node, what == "drop")) return ENOENT;
        return 0;
    }
    if (what == "stop") {
        for (auto &[id, c] : clients_)
            if (!c->is_ctl) post_async(c.get(), IBV_EVENT_DEVICE_FATAL, 0);
        stop_requested = true;
        return 0;
    }
    return EINVAL;
}

} // namespace simhca
