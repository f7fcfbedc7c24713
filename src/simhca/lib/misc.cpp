// SPDX-License-Identifier: BSD-3-Clause
// Address handles (kept in the library: the AV travels inside each UD WQE),
// and multicast (object import: import.cpp).
#include <cerrno>
#include <cstring>
#include <new>

#include "lib.hpp"

using namespace simhca;
using namespace simhca::lib;

SIMHCA_API ibv_ah *ibv_create_ah(ibv_pd *pd, ibv_ah_attr *attr) noexcept {
    if (!pd || !attr) return fail<ibv_ah>(EINVAL);
    if (attr->port_num != 1) return fail<ibv_ah>(EINVAL);
    auto *ah = new (std::nothrow) Ah{};
    if (!ah) return fail<ibv_ah>(ENOMEM);
    ah->ah.context = pd->context;
    ah->ah.pd = pd;
    ah->attr = *attr;
    return &ah->ah;
}

SIMHCA_API int ibv_destroy_ah(ibv_ah *ah) noexcept {
    if (!ah) return EINVAL;
    delete reinterpret_cast<Ah *>(ah);
    return 0;
}

// Multicast membership lives in the daemon (which fans UD datagrams sent to a
// multicast LID out to every attached QP on every node).
static int mcast_call(proto::Op op, ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) noexcept {
    if (!qp || !gid) return EINVAL;
    proto::Request req{};
    proto::Response resp{};
    req.mcast.qp = qp->handle;
    req.mcast.lid = lid;
    std::memcpy(req.mcast.gid, gid->raw, sizeof(req.mcast.gid));
    return ctx_of(qp->context)->conn.call(op, req, resp);
}

SIMHCA_API int ibv_attach_mcast(ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) noexcept {
    return mcast_call(proto::Op::AttachMcast, qp, gid, lid);
}
SIMHCA_API int ibv_detach_mcast(ibv_qp *qp, const union ibv_gid *gid, uint16_t lid) noexcept {
    return mcast_call(proto::Op::DetachMcast, qp, gid, lid);
}
