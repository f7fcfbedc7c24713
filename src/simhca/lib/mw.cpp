// SPDX-License-Identifier: BSD-3-Clause
// Memory windows (context->ops.alloc_mw / dealloc_mw / bind_mw). A type 1
// bind is a BIND_MW work request on the given QP with the next key variant,
// exactly what providers post for ibv_bind_mw.
#include <cerrno>
#include <new>

#include "lib.hpp"

namespace simhca::lib {

struct Mw {
    ibv_mw mw;
};

ibv_mw *alloc_mw(ibv_pd *pd, ibv_mw_type type) noexcept {
    if (!pd) return fail<ibv_mw>(EINVAL);
    proto::Request req{};
    proto::Response resp{};
    req.alloc_mw = {pd->handle, uint32_t(type)};
    if (int e = ctx_of(pd->context)->conn.call(proto::Op::AllocMw, req, resp)) return fail<ibv_mw>(e);
    auto *w = new (std::nothrow) Mw{};
    if (!w) return fail<ibv_mw>(ENOMEM);
    w->mw.context = pd->context;
    w->mw.pd = pd;
    w->mw.rkey = resp.reg_mr.rkey;
    w->mw.handle = resp.reg_mr.handle;
    w->mw.type = type;
    return &w->mw;
}

int dealloc_mw(ibv_mw *mw) noexcept {
    if (!mw) return EINVAL;
    proto::Request req{};
    proto::Response resp{};
    req.h.handle = mw->handle;
    if (int e = ctx_of(mw->context)->conn.call(proto::Op::DeallocMw, req, resp); e && e != ENODEV) return e;
    delete reinterpret_cast<Mw *>(mw);
    return 0;
}

int bind_mw(ibv_qp *qp, ibv_mw *mw, ibv_mw_bind *bind) noexcept {
    if (!qp || !mw || !bind) return EINVAL;
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = bind->wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = bind->send_flags;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = bind->bind_info;
    if (int e = post_send(qp, &wr, &bad)) return e;
    mw->rkey = wr.bind_mw.rkey; // what the peer will use once the bind completes
    return 0;
}

} // namespace simhca::lib
