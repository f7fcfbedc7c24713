// SPDX-License-Identifier: BSD-3-Clause
#include "object_table.hpp"

#include <unistd.h>

#include "../common/protocol.hpp"

namespace simhca {

// 24-bit index + 8-bit variant, like mlx keys; never one in use by an MR or MW.
uint32_t ObjectTable::new_key() {
    do {
        next_key = (next_key + 0x100 + 0x11) & 0xffffffffu;
    } while (next_key == 0 || key_to_mr.count(next_key) || key_to_mw.count(next_key));
    return next_key;
}

Client *ObjectTable::client(uint32_t id) {
    auto it = clients.find(id);
    return it == clients.end() ? nullptr : it->second.get();
}

Qp *ObjectTable::qp_by_num(uint32_t qpn) {
    auto it = qps.find(qpn);
    return it == qps.end() ? nullptr : it->second.get();
}

Srq *ObjectTable::srq_by_num(uint32_t srqn) {
    auto it = srqn_to_srq.find(srqn);
    if (it == srqn_to_srq.end()) return nullptr;
    return srqs[it->second].get();
}

Mr *ObjectTable::mr_by_key(uint32_t key) {
    auto it = key_to_mr.find(key);
    if (it == key_to_mr.end()) return nullptr;
    return mrs[it->second].get();
}

Xrcd *ObjectTable::xrcd_of_handle(Client &c, uint32_t h) {
    XrcdHandle *xh = owned(xrcd_handles, c, h);
    if (!xh) return nullptr;
    auto it = xrcds.find(xh->xrcd);
    return it == xrcds.end() ? nullptr : it->second.get();
}

void ObjectTable::unbind_mw(Mw &w) {
    if (w.bound)
        if (auto it = mrs.find(w.mr); it != mrs.end()) it->second->windows--;
    w.bound = false;
    w.mr = 0;
    w.qpn = 0;
}

bool ObjectTable::post_async(Client *c, ibv_event_type type, uint64_t cookie, uint32_t port) {
    if (!c || !c->async_wr) return false;
    proto::AsyncRecord rec{uint32_t(type), port, cookie};
    // Non-blocking: a client that never reads its events cannot stall the HCA.
    return ::write(c->async_wr.get(), &rec, sizeof(rec)) == ssize_t(sizeof(rec));
}

void ObjectTable::qp_event(Qp &qp, ibv_event_type type) {
    for (uint32_t hid : qp.handles) {
        auto it = qp_handles.find(hid);
        if (it == qp_handles.end()) continue;
        if (post_async(it->second->owner, type, it->second->cookie)) it->second->async_events++;
    }
}

void ObjectTable::broadcast_port_event(ibv_event_type type) {
    for (auto &[id, c] : clients)
        if (!c->is_ctl && !c->alias_of) post_async(c.get(), type, 0, 1);  // importers: see import.cpp
}

}  // namespace simhca
