// SPDX-License-Identifier: BSD-3-Clause
// Inspection (simhca-ctl status / list) and fault injection.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <sys/types.h>
#include <string>

#include "device.hpp"
#include "network.hpp"

namespace simhca {

namespace {
const char *state_name(ibv_qp_state s) {
    switch (s) {
        case IBV_QPS_RESET:
            return "RESET";
        case IBV_QPS_INIT:
            return "INIT";
        case IBV_QPS_RTR:
            return "RTR";
        case IBV_QPS_RTS:
            return "RTS";
        case IBV_QPS_SQD:
            return "SQD";
        case IBV_QPS_SQE:
            return "SQE";
        case IBV_QPS_ERR:
            return "ERR";
        default:
            return "?";
    }
}
const char *type_name(ibv_qp_type t) {
    switch (t) {
        case IBV_QPT_RC:
            return "RC";
        case IBV_QPT_UD:
            return "UD";
        case IBV_QPT_XRC_SEND:
            return "XRC_INI";
        case IBV_QPT_XRC_RECV:
            return "XRC_TGT";
        default:
            return "?";
    }
}
}  // namespace

// Builds the listing into listing_ (sent as one large datagram after the
// reply header, see Server). Human table or JSON with the same content.
int Device::do_status(proto::Response &, bool json) {
    std::string &out = listing_;
    out.clear();
    char line[512];
    // A literal without arguments is appended as it is: it is no format (Debian builds with
    // -Werror=format-security, which rejects a non-literal format without arguments).
    auto add = [&](const char *fmt, auto... a) {
        if constexpr (sizeof...(a) == 0) {
            out += fmt;
        } else {
            std::snprintf(line, sizeof(line), fmt, a...);
            out += line;
        }
    };
    struct PerPid {
        size_t pds = 0, mrs = 0, cqs = 0, srqs = 0, qps = 0, qp_handles = 0, xrcds = 0;
    };
    std::map<pid_t, PerPid> per;
    size_t nclients = 0;
    for (auto &[id, c] : objs_.clients)
        if (!c->is_ctl) ++nclients, per[c->pid];
    for (auto &[id, p] : objs_.pds) per[p->owner->pid].pds++;
    for (auto &[id, m] : objs_.mrs) per[m->owner->pid].mrs++;
    for (auto &[id, q] : objs_.cqs) per[q->owner->pid].cqs++;
    for (auto &[id, q] : objs_.srqs) per[q->owner->pid].srqs++;
    for (auto &[id, h] : objs_.xrcd_handles) per[h->owner->pid].xrcds++;
    for (auto &[id, h] : objs_.qp_handles) per[h->owner->pid].qp_handles++;
    for (auto &[qpn, q] : objs_.qps)
        if (q->owner) per[q->owner->pid].qps++;
    auto handle_pids = [&](const Qp &q) {
        std::string pids;
        for (uint32_t hid : q.handles)
            if (auto it = objs_.qp_handles.find(hid); it != objs_.qp_handles.end())
                pids += (pids.empty() ? "" : ",") + std::to_string(it->second->owner->pid);
        return pids;
    };
    const char *port = objs_.port_state == IBV_PORT_ACTIVE ? "ACTIVE" : "DOWN";
    if (json) {
        add("{\"node\":\"%s\",\"lid\":%u,\"port\":\"%s\",\"clients\":%zu,\"pds\":%zu,\"mrs\":%zu,\"cqs\":%zu,"
            "\"srqs\":%zu,\"xrcds\":%zu,\"qps\":%zu,\"counters\":{",
            objs_.cfg.node.c_str(), objs_.cfg.lid, port, nclients, objs_.pds.size(), objs_.mrs.size(), objs_.cqs.size(),
            objs_.srqs.size(), objs_.xrcds.size(), objs_.qps.size());
        bool first = true;
        for (const auto &c : kPortCounters) {
            add("%s\"%s\":%llu", first ? "" : ",", c.name, (unsigned long long)(objs_.counters.*c.field));
            first = false;
        }
        add("},\"processes\":[");
        first = true;
        for (auto &[pid, c] : per) {
            add("%s{\"pid\":%d,\"pds\":%zu,\"mrs\":%zu,\"cqs\":%zu,\"srqs\":%zu,\"qps\":%zu,\"qp_handles\":%zu,"
                "\"xrcd_handles\":%zu}",
                first ? "" : ",", int(pid), c.pds, c.mrs, c.cqs, c.srqs, c.qps, c.qp_handles, c.xrcds);
            first = false;
        }
        add("],\"qp_list\":[");
        first = true;
        for (auto &[qpn, qp] : objs_.qps) {
            add("%s{\"qpn\":%u,\"type\":\"%s\",\"state\":\"%s\",\"pid\":%d,\"handles\":%zu,\"handle_pids\":[%s],"
                "\"xrcd\":%u,\"srq\":%u,\"dest_qpn\":%u,\"dlid\":%u}",
                first ? "" : ",", qpn, type_name(qp->type), state_name(qp->state), qp->owner ? qp->owner->pid : 0,
                qp->handles.size(), handle_pids(*qp).c_str(), qp->xrcd, qp->srq ? objs_.srqs[qp->srq]->srqn : 0,
                qp->attr.dest_qp_num, qp->attr.ah_attr.dlid);
            first = false;
        }
        add("],\"srq_list\":[");
        first = true;
        for (auto &[id, s] : objs_.srqs) {
            uint32_t posted = s->ctl->rq.head.load() - s->ctl->rq.tail.load();
            add("%s{\"srqn\":%u,\"type\":\"%s\",\"pid\":%d,\"xrcd\":%u,\"max_wr\":%u,\"posted\":%u,\"limit\":%u}",
                first ? "" : ",", s->srqn,
                s->type == IBV_SRQT_XRC  ? "XRC"
                : s->type == IBV_SRQT_TM ? "TM"
                                         : "BASIC",
                s->owner->pid, s->xrcd, s->max_wr, posted, s->limit);
            first = false;
        }
        add("],\"xrcd_list\":[");
        first = true;
        for (auto &[id, x] : objs_.xrcds) {
            std::string pids;
            for (auto &[hid, h] : objs_.xrcd_handles)
                if (h->xrcd == id) pids += (pids.empty() ? "" : ",") + std::to_string(h->owner->pid);
            add("%s{\"id\":%u,\"inode\":%lu,\"dev\":%lu,\"usecnt\":%d,\"opened_by\":[%s]}", first ? "" : ",", id,
                (unsigned long)x->ino, (unsigned long)x->dev, x->usecnt, pids.c_str());
            first = false;
        }
        add("],\"mr_list\":[");
        first = true;
        for (auto &[id, m] : objs_.mrs) {
            add("%s{\"pid\":%d,\"key\":%u,\"addr\":%llu,\"length\":%llu,\"access\":%d}", first ? "" : ",",
                m->owner->pid, m->key, (unsigned long long)m->addr, (unsigned long long)m->length, m->access);
            first = false;
        }
        add("]}\n");
    } else {
        add("node %s lid %u port %s\n", objs_.cfg.node.c_str(), objs_.cfg.lid, port);
        add("clients %zu pds %zu mrs %zu cqs %zu srqs %zu xrcds %zu qps %zu\n", nclients, objs_.pds.size(),
            objs_.mrs.size(), objs_.cqs.size(), objs_.srqs.size(), objs_.xrcds.size(), objs_.qps.size());
        add("%s", proto::kCountersLinePrefix);
        for (const auto &c : kPortCounters) add(" %s %llu", c.name, (unsigned long long)(objs_.counters.*c.field));
        add("\n");
        if (!per.empty()) {
            add("\n%-8s %5s %5s %5s %5s %5s %10s %6s\n", "PID", "PDS", "MRS", "CQS", "SRQS", "QPS", "QPHANDLES",
                "XRCDS");
            for (auto &[pid, c] : per)
                add("%-8d %5zu %5zu %5zu %5zu %5zu %10zu %6zu\n", int(pid), c.pds, c.mrs, c.cqs, c.srqs, c.qps,
                    c.qp_handles, c.xrcds);
        }
        if (!objs_.qps.empty()) {
            add("\n%-8s %-8s %-6s %-8s %-7s %-12s %-5s %-8s %s\n", "QPN", "TYPE", "STATE", "PID", "HANDLES",
                "HANDLE_PIDS", "XRCD", "DEST_QPN", "DLID");
            for (auto &[qpn, qp] : objs_.qps)
                add("0x%-6x %-8s %-6s %-8d %-7zu %-12s %-5u 0x%-6x %u\n", qpn, type_name(qp->type),
                    state_name(qp->state), qp->owner ? qp->owner->pid : 0, qp->handles.size(), handle_pids(*qp).c_str(),
                    qp->xrcd, qp->attr.dest_qp_num, qp->attr.ah_attr.dlid);
        }
        if (!objs_.srqs.empty()) {
            add("\n%-8s %-6s %-8s %-5s %-7s %-7s %s\n", "SRQN", "TYPE", "PID", "XRCD", "MAX_WR", "POSTED", "LIMIT");
            for (auto &[id, s] : objs_.srqs)
                add("0x%-6x %-6s %-8d %-5u %-7u %-7u %u\n", s->srqn,
                    s->type == IBV_SRQT_XRC  ? "XRC"
                    : s->type == IBV_SRQT_TM ? "TM"
                                             : "BASIC",
                    s->owner->pid, s->xrcd, s->max_wr, s->ctl->rq.head.load() - s->ctl->rq.tail.load(), s->limit);
        }
        if (!objs_.xrcds.empty()) {
            add("\n%-6s %-12s %-7s %s\n", "XRCD", "INODE", "USECNT", "OPENED_BY");
            for (auto &[id, x] : objs_.xrcds) {
                std::string pids;
                for (auto &[hid, h] : objs_.xrcd_handles)
                    if (h->xrcd == id) pids += (pids.empty() ? "" : ",") + std::to_string(h->owner->pid);
                add("%-6u %-12lu %-7d %s\n", id, (unsigned long)x->ino, x->usecnt, pids.c_str());
            }
        }
    }
    return 0;
}

int Device::do_fault(const proto::FaultReq &q) {
    std::string what(q.what, strnlen(q.what, sizeof(q.what)));
    if (what == "port-down") {
        if (objs_.port_state != IBV_PORT_DOWN) {
            objs_.port_state = IBV_PORT_DOWN;
            objs_.broadcast_port_event(IBV_EVENT_PORT_ERR);
        }
        return 0;
    }
    if (what == "port-up") {
        if (objs_.port_state != IBV_PORT_ACTIVE) {
            objs_.port_state = IBV_PORT_ACTIVE;
            objs_.broadcast_port_event(IBV_EVENT_PORT_ACTIVE);
        }
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
