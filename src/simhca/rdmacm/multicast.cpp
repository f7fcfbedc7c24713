// SPDX-License-Identifier: BSD-3-Clause
// Multicast: rdma_join_multicast(_ex), rdma_leave_multicast. The IP group address maps to an MGID the
// way the kernel's CM maps it for IB (IPoIB's mapping, ff12:401b:pkey::IP, with the RDMA CM signature
// 0x4001 in the UDP port space); the MLID, which an SA would assign, is derived from the MGID so every
// process of every node agrees on it without one. The id's QP is attached unless it joins send-only.
#include "cm.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>

namespace simhca_cm {
namespace {

bool make_mgid(const Id &id, const sockaddr *addr, ibv_gid &mgid) noexcept
{
    memset(&mgid, 0, sizeof(mgid));
    if (addr->sa_family == AF_INET6) {
        const auto &a6 = reinterpret_cast<const sockaddr_in6 *>(addr)->sin6_addr;
        // An address that already is an SA-assigned MGID (ff1x:a01b::) is used as it is.
        if (a6.s6_addr[0] == 0xff && (a6.s6_addr[1] & 0xf0) == 0x10 && a6.s6_addr[2] == 0xa0 && a6.s6_addr[3] == 0x1b) {
            memcpy(mgid.raw, a6.s6_addr, 16);
            return true;
        }
        mgid.raw[0] = 0xff;
        mgid.raw[1] = 0x12;
        mgid.raw[2] = 0x60;
        mgid.raw[3] = id.pub.ps == RDMA_PS_UDP ? 0x01 : 0x1b;
        mgid.raw[4] = 0xff;
        mgid.raw[5] = 0xff;
        memcpy(mgid.raw + 6, a6.s6_addr + 6, 10);
        return true;
    }
    if (addr->sa_family != AF_INET)
        return false;
    uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in *>(addr)->sin_addr.s_addr);
    mgid.raw[0] = 0xff;
    mgid.raw[1] = 0x12;
    mgid.raw[2] = 0x40;
    mgid.raw[3] = id.pub.ps == RDMA_PS_UDP ? 0x01 : 0x1b;
    mgid.raw[4] = 0xff; // the default P_Key
    mgid.raw[5] = 0xff;
    mgid.raw[12] = static_cast<uint8_t>((ip >> 24) & 0x0f);
    mgid.raw[13] = static_cast<uint8_t>(ip >> 16);
    mgid.raw[14] = static_cast<uint8_t>(ip >> 8);
    mgid.raw[15] = static_cast<uint8_t>(ip);
    return true;
}

uint16_t mlid_of(const ibv_gid &mgid) noexcept
{
    uint32_t h = 2166136261u; // FNV-1a over the MGID
    for (uint8_t b : mgid.raw)
        h = (h ^ b) * 16777619u;
    return static_cast<uint16_t>(0xC000 + h % 0x3FFF); // multicast LIDs: 0xC000-0xFFFE
}

bool same_addr(const sockaddr_storage &a, const sockaddr *b) noexcept
{
    socklen_t len = addr_len(b);
    return len && a.ss_family == b->sa_family && memcmp(&a, b, len) == 0;
}

} // namespace
} // namespace simhca_cm

using namespace simhca_cm;

extern "C" {

int rdma_join_multicast_ex(rdma_cm_id *cid, rdma_cm_join_mc_attr_ex *mc_join_attr, void *context)
{
    if (!cid || !mc_join_attr)
        return fail(EINVAL);
    if (!(mc_join_attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) ||
        !(mc_join_attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
        (mc_join_attr->comp_mask & ~(RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS)))
        return fail(EINVAL);
    if (mc_join_attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED)
        return fail(EINVAL);
    const sockaddr *addr = mc_join_attr->addr;
    if (!addr_len(addr))
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    std::unique_lock lk(global().mu);
    // The kernel requires a bound or resolved id (it needs the device).
    if (!id.pub.verbs || (id.state != State::Bound && id.state != State::AddrResolved && id.state != State::RouteResolved))
        return fail(EINVAL);
    for (auto &mc : id.mcast)
        if (same_addr(mc.addr, addr))
            return fail(EADDRINUSE);
    Multicast mc;
    memcpy(&mc.addr, addr, addr_len(addr));
    if (!make_mgid(id, addr, mc.mgid))
        return fail(EINVAL);
    mc.mlid = mlid_of(mc.mgid);
    auto ev = make_event(id, RDMA_CM_EVENT_MULTICAST_JOIN);
    if (!ev)
        return fail(ENOMEM);
    if (id.pub.qp && mc_join_attr->join_flags == RDMA_MC_JOIN_FLAG_FULLMEMBER) {
        if (ibv_attach_mcast(id.pub.qp, &mc.mgid, mc.mlid) != 0) {
            ev->ev.event = RDMA_CM_EVENT_MULTICAST_ERROR;
            ev->ev.status = -(errno ? errno : EINVAL);
        } else {
            mc.attached = true;
        }
    }
    // As librdmacm: the join's context comes back as the event's private_data.
    ev->ev.param.ud.private_data = context;
    ev->ev.param.ud.private_data_len = 0;
    auto &ah = ev->ev.param.ud.ah_attr;
    ah.dlid = mc.mlid;
    ah.port_num = 1;
    ah.is_global = 1;
    ah.grh.dgid = mc.mgid;
    ah.grh.sgid_index = 0;
    ah.grh.hop_limit = 1;
    ev->ev.param.ud.qp_num = 0xFFFFFF;
    ev->ev.param.ud.qkey = id.pub.ps == RDMA_PS_IPOIB ? RDMA_IPOIB_QKEY : RDMA_UDP_QKEY;
    if (ev->ev.event == RDMA_CM_EVENT_MULTICAST_JOIN)
        id.mcast.push_back(mc);
    queue_event(*id.channel, std::move(ev));
    return id.sync ? complete_sync(lk, id) : 0;
}

int rdma_join_multicast(rdma_cm_id *id, sockaddr *addr, void *context)
{
    rdma_cm_join_mc_attr_ex attr{};
    attr.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
    attr.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
    attr.addr = addr;
    return rdma_join_multicast_ex(id, &attr, context);
}

int rdma_leave_multicast(rdma_cm_id *cid, sockaddr *addr)
{
    if (!cid || !addr_len(addr))
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    std::lock_guard lk(global().mu);
    for (auto it = id.mcast.begin(); it != id.mcast.end(); ++it) {
        if (!same_addr(it->addr, addr))
            continue;
        if (it->attached && id.pub.qp)
            ibv_detach_mcast(id.pub.qp, &it->mgid, it->mlid);
        id.mcast.erase(it);
        return 0;
    }
    return fail(EADDRNOTAVAIL);
}

} // extern "C"
