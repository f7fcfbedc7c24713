// SPDX-License-Identifier: BSD-3-Clause
// UD multicast: membership (ibv_attach_mcast / ibv_detach_mcast, kept per
// (MLID, MGID) like an SM's multicast groups) and the fan-out of a datagram
// sent to a multicast LID with QPN 0xFFFFFF to every member QP of this node;
// the sending node also forwards it to every other node (requester.cpp).
// Membership is a control verb (Device), the fan-out belongs to the Responder.
// Rules as the kernel's ib_attach_mcast: UD QPs only, a multicast GID (ff..)
// and a multicast LID (0xC000..0xFFFE), attaching twice is a no-op, detaching
// what is not attached is EINVAL, and destroying a QP detaches it.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "../common/limits.hpp"
#include "device.hpp"
#include "responder.hpp"

namespace simhca {

namespace {

std::pair<uint16_t, std::array<uint8_t, 16>> group_key(const proto::McastReq &q) {
    std::pair<uint16_t, std::array<uint8_t, 16>> k{q.lid, {}};
    std::memcpy(k.second.data(), q.gid, 16);
    return k;
}

bool valid_group(const proto::McastReq &q) {
    return q.gid[0] == 0xff && q.lid >= limits::kMcastLidBase && q.lid != 0xffff;
}

}  // namespace

int Device::do_attach_mcast(Client &c, const proto::McastReq &q) {
    auto h = objs_.qp_handles.find(q.qp);
    if (h == objs_.qp_handles.end() || h->second->owner != &c) return EINVAL;
    Qp *qp = objs_.qp_by_num(h->second->qpn);
    if (!qp || qp->type != IBV_QPT_UD || !valid_group(q)) return EINVAL;
    auto it = objs_.mcast.find(group_key(q));
    if (it == objs_.mcast.end()) {
        if (objs_.mcast.size() >= limits::kMaxMcastGrp) return ENOMEM;
        it = objs_.mcast.emplace(group_key(q), std::vector<uint32_t>{}).first;
    }
    auto &members = it->second;
    if (std::find(members.begin(), members.end(), qp->qpn) != members.end()) return 0;
    if (members.size() >= limits::kMaxMcastQpAttach) return ENOMEM;
    members.push_back(qp->qpn);
    return 0;
}

int Device::do_detach_mcast(Client &c, const proto::McastReq &q) {
    auto h = objs_.qp_handles.find(q.qp);
    if (h == objs_.qp_handles.end() || h->second->owner != &c) return EINVAL;
    auto it = objs_.mcast.find(group_key(q));
    if (it == objs_.mcast.end() || !std::erase(it->second, h->second->qpn)) return EINVAL;
    if (it->second.empty()) objs_.mcast.erase(it);
    return 0;
}

void Device::mcast_forget_qp(uint32_t qpn) {
    for (auto it = objs_.mcast.begin(); it != objs_.mcast.end();) {
        std::erase(it->second, qpn);
        it = it->second.empty() ? objs_.mcast.erase(it) : std::next(it);
    }
}

// Every member of a group with the packet's MLID (and, when it carries a GRH,
// its destination GID) gets a copy, subject to its own Q_Key and receive
// queue like any datagram. Datagrams are never answered.
Reply Responder::respond_mcast(const Message &m) {
    std::array<uint8_t, 16> dgid{};
    if (m.has_grh) std::memcpy(dgid.data(), m.grh + 24, 16);
    std::set<uint32_t> targets;  // a QP in two matching groups gets one copy
    for (const auto &[key, members] : objs_.mcast)
        if (key.first == m.dlid && (!m.has_grh || key.second == dgid)) targets.insert(members.begin(), members.end());
    for (uint32_t qpn : targets) {
        Message copy = m;
        copy.dst_qpn = qpn;
        respond(copy);
    }
    Reply r;
    r.status = RespStatus::Drop;
    return r;
}

}  // namespace simhca
