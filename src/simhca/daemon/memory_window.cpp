// Memory windows: allocation, binding (type 1 through ibv_bind_mw, type 2
// through IBV_WR_BIND_MW), local and remote invalidation. Binds and local
// invalidations are work requests executed in send-queue order, without a
// message to the peer.
#include <cerrno>

#include "../common/limits.hpp"
#include "device.hpp"

namespace simhca {

using namespace proto;

// 24-bit index + 8-bit variant, like mlx keys; never one in use by an MR or MW.
uint32_t Device::new_key() {
    do {
        next_key_ = (next_key_ + 0x100 + 0x11) & 0xffffffffu;
    } while (next_key_ == 0 || key_to_mr_.count(next_key_) || key_to_mw_.count(next_key_));
    return next_key_;
}

int Device::do_alloc_mw(Client &c, const AllocMwReq &q, Response &r) {
    Pd *pd = owned(pds_, c, q.pd);
    if (!pd) return EINVAL;
    if (q.type != IBV_MW_TYPE_1 && q.type != IBV_MW_TYPE_2) return EINVAL;
    if (mws_.size() >= limits::kMaxMr) return ENOMEM;
    auto w = std::make_unique<Mw>();
    w->id = new_id();
    w->owner = &c;
    w->pd = q.pd;
    w->type = int(q.type);
    w->key = new_key();
    key_to_mw_[w->key] = w->id;
    pd->users++;
    r.reg_mr = {w->id, w->key, w->key};
    mws_[w->id] = std::move(w);
    return 0;
}

void Device::unbind_mw(Mw &w) {
    if (w.bound)
        if (auto it = mrs_.find(w.mr); it != mrs_.end()) it->second->windows--;
    w.bound = false;
    w.mr = 0;
    w.qpn = 0;
}

int Device::do_dealloc_mw(Client &c, uint32_t h) {
    Mw *w = owned(mws_, c, h);
    if (!w) return EINVAL;
    unbind_mw(*w);
    if (auto it = pds_.find(w->pd); it != pds_.end()) it->second->users--;
    key_to_mw_.erase(w->key);
    mws_.erase(h);
    return 0;
}

// WQE encoding (lib/post.cpp): rkey = new key, remote_addr/compare_add =
// range, swap = MR handle << 32 | MW handle, remote_qkey = access flags,
// imm_data = key to invalidate.
ibv_wc_status Device::local_op(Qp &qp, const shm::SendWqe &w) {
    if (w.opcode == IBV_WR_LOCAL_INV) {
        auto it = key_to_mw_.find(w.imm_data);
        if (it == key_to_mw_.end()) return IBV_WC_MW_BIND_ERR;
        Mw &mw = *mws_[it->second];
        if (mw.owner != qp.owner || mw.type != IBV_MW_TYPE_2 || mw.pd != qp.pd) return IBV_WC_MW_BIND_ERR;
        unbind_mw(mw);
        return IBV_WC_SUCCESS;
    }
    // IBV_WR_BIND_MW
    Mw *mw = owned(mws_, *qp.owner, uint32_t(w.swap));
    if (!mw || mw->pd != qp.pd) return IBV_WC_MW_BIND_ERR;
    uint32_t mr_handle = uint32_t(w.swap >> 32);
    uint64_t addr = w.remote_addr, len = w.compare_add;
    int access = int(w.remote_qkey);
    // A type 2 window must be free, and keeps its index (only the variant changes).
    if (mw->type == IBV_MW_TYPE_2 && (mw->bound || (w.rkey >> 8) != (mw->key >> 8))) return IBV_WC_MW_BIND_ERR;
    Mr *mr = nullptr;
    if (len) {
        mr = owned(mrs_, *qp.owner, mr_handle);
        if (!mr || mr->pd != qp.pd || !(mr->access & IBV_ACCESS_MW_BIND) || addr < mr->iova ||
            addr + len > mr->iova + mr->length || addr + len < addr)
            return IBV_WC_MW_BIND_ERR;
        if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(mr->access & IBV_ACCESS_LOCAL_WRITE))
            return IBV_WC_MW_BIND_ERR;
    }
    if (w.rkey != mw->key) {
        if (key_to_mr_.count(w.rkey) || key_to_mw_.count(w.rkey)) return IBV_WC_MW_BIND_ERR;
        key_to_mw_.erase(mw->key);
        mw->key = w.rkey;
        key_to_mw_[mw->key] = mw->id;
    }
    unbind_mw(*mw);
    if (len) { // a zero-length bind just invalidates (type 1)
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
bool Device::invalidate_remote(Qp &t, uint32_t rkey) {
    auto it = key_to_mw_.find(rkey);
    if (it == key_to_mw_.end()) return false;
    Mw &mw = *mws_[it->second];
    if (mw.type != IBV_MW_TYPE_2 || !mw.bound || mw.pd != t.pd) return false;
    unbind_mw(mw);
    return true;
}

} // namespace simhca
