// SPDX-License-Identifier: BSD-3-Clause
// Protection domains and memory regions. Registration only records the
// range in the daemon: the daemon reads and writes it with
// process_vm_readv/writev, so nothing is pinned.
#include <cerrno>
#include <cstring>
#include <new>

#include "lib.hpp"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

using namespace simhca;
using namespace simhca::lib;

SIMHCA_API ibv_pd *ibv_alloc_pd(ibv_context *context) noexcept {
    if (!context) return fail<ibv_pd>(EINVAL);
    proto::Request req{};
    proto::Response resp{};
    if (int e = ctx_of(context)->conn.call(proto::Op::AllocPd, req, resp)) return fail<ibv_pd>(e);
    auto *p = new (std::nothrow) Pd{};
    if (!p) return fail<ibv_pd>(ENOMEM);
    p->pd.context = context;
    p->pd.handle = resp.h.handle;
    return &p->pd;
}

SIMHCA_API int ibv_dealloc_pd(ibv_pd *pd) noexcept {
    if (!pd) return EINVAL;
    {
        Context *c = ctx_of(pd->context);
        std::unique_lock<std::mutex> g(c->reg_mu);
        if (c->parents.erase(pd)) { // a parent domain: only the name goes
            g.unlock();
            delete reinterpret_cast<Pd *>(pd);
            return 0;
        }
    }
    proto::Request req{};
    proto::Response resp{};
    req.h.handle = pd->handle;
    if (int e = ctx_of(pd->context)->conn.call(proto::Op::DeallocPd, req, resp)) return e;
    delete reinterpret_cast<Pd *>(pd);
    return 0;
}

SIMHCA_API ibv_mr *ibv_reg_mr_iova2(ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                    unsigned int access) noexcept {
    if (!pd) return fail<ibv_mr>(EINVAL);
    proto::Request req{};
    proto::Response resp{};
    req.reg_mr = {pd->handle, int32_t(access), reinterpret_cast<uint64_t>(addr), length, iova};
    if (int e = ctx_of(pd->context)->conn.call(proto::Op::RegMr, req, resp)) return fail<ibv_mr>(e);
    auto *m = new (std::nothrow) Mr{};
    if (!m) return fail<ibv_mr>(ENOMEM);
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = length;
    m->mr.handle = resp.reg_mr.handle;
    m->mr.lkey = resp.reg_mr.lkey;
    m->mr.rkey = resp.reg_mr.rkey;
    return &m->mr;
}

SIMHCA_API ibv_mr *ibv_reg_mr(ibv_pd *pd, void *addr, size_t length, int access) noexcept {
    return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<uint64_t>(addr), unsigned(access));
}

SIMHCA_API ibv_mr *ibv_reg_mr_iova(ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access) noexcept {
    return ibv_reg_mr_iova2(pd, addr, length, iova, unsigned(access));
}

namespace simhca::lib {
// Prefetch advice: the daemon touches pages only when it copies, so there is
// nothing to prefetch; validate like a device would and succeed.
int advise_mr(ibv_pd *pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge *sg, uint32_t n) noexcept {
    if (!pd || !sg || n == 0) return EINVAL;
    if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
        advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
        return EOPNOTSUPP;
    if (flags & ~uint32_t(IBV_ADVISE_MR_FLAG_FLUSH)) return EINVAL;
    return 0;
}
} // namespace simhca::lib

namespace simhca::lib {

// Thread domains only promise single-threaded use; nothing to set up.
ibv_td *alloc_td(ibv_context *c, ibv_td_init_attr *attr) noexcept {
    if (!c || !attr || attr->comp_mask) return fail<ibv_td>(EINVAL);
    auto *td = new (std::nothrow) ibv_td{c};
    return td ? td : fail<ibv_td>(ENOMEM);
}

int dealloc_td(ibv_td *td) noexcept {
    delete td;
    return 0;
}

// Queue buffers live in daemon-provided shared memory, so custom allocators
// are accepted but never needed (a provider may ignore them too).
ibv_pd *alloc_parent_domain(ibv_context *c, ibv_parent_domain_init_attr *attr) noexcept {
    if (!c || !attr || !attr->pd) return fail<ibv_pd>(EINVAL);
    if (attr->comp_mask & ~uint32_t(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT))
        return fail<ibv_pd>(EOPNOTSUPP);
    auto *p = new (std::nothrow) Pd{};
    if (!p) return fail<ibv_pd>(ENOMEM);
    p->pd.context = c;
    p->pd.handle = attr->pd->handle;
    std::lock_guard<std::mutex> g(ctx_of(c)->reg_mu);
    ctx_of(c)->parents.insert(&p->pd);
    return &p->pd;
}

} // namespace simhca::lib

SIMHCA_API ibv_mr *ibv_reg_dmabuf_mr(ibv_pd *, uint64_t, size_t, uint64_t, int, int) noexcept {
    return fail<ibv_mr>(EOPNOTSUPP); // no device memory to export here
}

SIMHCA_API int ibv_dereg_mr(ibv_mr *mr) noexcept {
    if (!mr) return EINVAL;
    proto::Request req{};
    proto::Response resp{};
    req.h.handle = mr->handle;
    if (int e = ctx_of(mr->context)->conn.call(proto::Op::DeregMr, req, resp)) return e;
    delete reinterpret_cast<Mr *>(mr);
    return 0;
}

// Re-registration in the daemon: the MR keeps its handle and keys.
SIMHCA_API int ibv_rereg_mr(ibv_mr *mr, int flags, ibv_pd *pd, void *addr, size_t length, int access) noexcept {
    if (!mr || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) || flags == 0) {
        errno = EINVAL;
        return IBV_REREG_MR_ERR_INPUT;
    }
    if (((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) ||
        ((flags & IBV_REREG_MR_CHANGE_PD) && !pd)) {
        errno = EINVAL;
        return IBV_REREG_MR_ERR_INPUT;
    }
    proto::Request req{};
    proto::Response resp{};
    req.rereg_mr.handle = mr->handle;
    req.rereg_mr.flags = flags;
    req.rereg_mr.pd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd->handle : 0;
    req.rereg_mr.access = access;
    req.rereg_mr.addr = reinterpret_cast<uint64_t>(addr);
    req.rereg_mr.length = length;
    req.rereg_mr.iova = reinterpret_cast<uint64_t>(addr);
    if (int e = ctx_of(mr->context)->conn.call(proto::Op::ReregMr, req, resp)) {
        errno = e;
        return IBV_REREG_MR_ERR_CMD;
    }
    if (flags & IBV_REREG_MR_CHANGE_PD) mr->pd = pd;
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        mr->addr = addr;
        mr->length = length;
    }
    mr->lkey = resp.reg_mr.lkey;
    mr->rkey = resp.reg_mr.rkey;
    return 0;
}
