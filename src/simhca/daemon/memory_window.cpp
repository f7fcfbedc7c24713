// SPDX-License-Identifier: BSD-3-Clause
// Memory windows: allocation, binding (type 1 through ibv_bind_mw, type 2
// through IBV_WR_BIND_MW), local and remote invalidation. Binds and local
// invalidations are work requests executed in send-queue order, without a
// message to the peer. Allocation is a control verb (Device), binds and local
// invalidations run in the Requester, SEND_WITH_INV's invalidation in the
// Responder.
#include <cerrno>

#include "../common/limits.hpp"
#include "device.hpp"
#include "requester.hpp"
#include "responder.hpp"

namespace simhca {

using namespace proto;

int Device::do_alloc_mw(Client &c, const AllocMwReq &q, Response &r) {
    Pd *pd = objs_.owned(objs_.pds, c, q.pd);
    if (!pd) return EINVAL;
    if (q.type != IBV_MW_TYPE_1 && q.type != IBV_MW_TYPE_2) return EINVAL;
    if (objs_.mws.size() >= limits::kMaxMr) return ENOMEM;
    auto w = std::make_unique<Mw>();
    w->id = objs_.new_id();
    w->owner = &c;
    w->pd = q.pd;
    w->type = int(q.type);
    w->key = objs_.new_key();
    objs_.key_to_mw[w->key] = w->id;
    pd->users++;
    r.reg_mr = {w->id, w->key, w->key};
    objs_.mws[w->id] = std::move(w);
    return 0;
}

int Device::do_dealloc_mw(Client &c, uint32_t h) {
    Mw *w = objs_.owned(objs_.mws, c, h);
    if (!w) return EINVAL;
    objs_.unbind_mw(*w);
    if (auto it = objs_.pds.find(w->pd); it != objs_.pds.end()) it->second->users--;
    objs_.key_to_mw.erase(w->key);
    objs_.mws.erase(h);
    return 0;
}

// WQE encoding (lib/post.cpp): rkey = new key, remote_addr/compare_add =
// range, swap = MR handle << 32 | MW handle, remote_qkey = access flags,
// imm_data = key to invalidate.
ibv_wc_status Requester::local_op(Qp &qp, const shm::SendWqe &w) {
    if (w.opcode == IBV_WR_LOCAL_INV) {
        auto it = objs_.key_to_mw.find(w.imm_data);
        if (it == objs_.key_to_mw.end()) return IBV_WC_MW_BIND_ERR;
        Mw &mw = *objs_.mws[it->second];
        if (mw.owner != qp.owner || mw.type != IBV_MW_TYPE_2 || mw.pd != qp.pd) return IBV_WC_MW_BIND_ERR;
        objs_.unbind_mw(mw);
        return IBV_WC_SUCCESS;
    }
    // IBV_WR_BIND_MW
    Mw *mw = objs_.owned(objs_.mws, *qp.owner, uint32_t(w.swap));
    if (!mw || mw->pd != qp.pd) return IBV_WC_MW_BIND_ERR;
    uint32_t mr_handle = uint32_t(w.swap >> 32);
    uint64_t addr = w.remote_addr, len = w.compare_add;
    int access = int(w.remote_qkey);
    // A type 2 window must be free, and keeps its index (only the variant changes).
    if (mw->type == IBV_MW_TYPE_2 && (mw->bound || (w.rkey >> 8) != (mw->key >> 8))) return IBV_WC_MW_BIND_ERR;
    Mr *mr = nullptr;
    if (len) {
        mr = objs_.owned(objs_.mrs, *qp.owner, mr_handle);
        if (!mr || mr->pd != qp.pd || !(mr->access & IBV_ACCESS_MW_BIND) || addr < mr->iova ||
            addr + len > mr->iova + mr->length || addr + len < addr)
            return IBV_WC_MW_BIND_ERR;
        if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(mr->access & IBV_ACCESS_LOCAL_WRITE))
            return IBV_WC_MW_BIND_ERR;
    }
    if (w.rkey != mw->key) {
        if (objs_.key_to_mr.count(w.rkey) || objs_.key_to_mw.count(w.rkey)) return IBV_WC_MW_BIND_ERR;
        objs_.key_to_mw.erase(mw->key);
        mw->key = w.rkey;
        objs_.key_to_mw[mw->key] = mw->id;
    }
    objs_.unbind_mw(*mw);
    if (len) {  // a zero-length bind just invalidates (type 1)
        mw->bound = true;
        mw->mr = mr->id;
        mw->addr = addr;
        mw->length = len;
        mw->access = access;
        mw->qpn = mw->type == IBV_MW_TYPE_2 ? qp.qpn : 0;
        mr->windows++;
    }
    return IBV_WC_SUCCESS;
}

// SEND_WITH_INV at the responder: the key must name a bound type 2 window
// of the receiving QP's PD.
bool Responder::invalidate_remote(Qp &t, uint32_t rkey) {
    auto it = objs_.key_to_mw.find(rkey);
    if (it == objs_.key_to_mw.end()) return false;
    Mw &mw = *objs_.mws[it->second];
    if (mw.type != IBV_MW_TYPE_2 || !mw.bound || mw.pd != t.pd) return false;
    objs_.unbind_mw(mw);
    return true;
}

}  // namespace simhca
