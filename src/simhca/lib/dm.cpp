// SPDX-License-Identifier: BSD-3-Clause
// Device memory (verbs_context alloc_dm / free_dm / reg_dm_mr): the daemon's
// memfd mapped here too; copies in and out are plain memcpy, with mlx5's
// rule that offsets and lengths are multiples of 4.
#include <cerrno>
#include <cstring>
#include <new>

#include "../common/limits.hpp"
#include "lib.hpp"

namespace simhca::lib {

namespace {
struct Dm {
    ibv_dm dm;
    Mapping map;
    size_t length = 0;
};

int to_dm(ibv_dm *ibdm, uint64_t off, const void *src, size_t len) {
    auto *d = reinterpret_cast<Dm *>(ibdm);
    if ((off & 3) || (len & 3) || off > d->length || len > d->length - off) return EINVAL;
    std::memcpy(static_cast<char *>(d->map.base) + off, src, len);
    return 0;
}

int from_dm(void *dst, ibv_dm *ibdm, uint64_t off, size_t len) {
    auto *d = reinterpret_cast<Dm *>(ibdm);
    if ((off & 3) || (len & 3) || off > d->length || len > d->length - off) return EINVAL;
    std::memcpy(dst, static_cast<char *>(d->map.base) + off, len);
    return 0;
}
} // namespace

ibv_dm *alloc_dm(ibv_context *c, ibv_alloc_dm_attr *attr) noexcept {
    if (!c || !attr || attr->comp_mask) return fail<ibv_dm>(EINVAL);
    if (attr->length == 0 || attr->length > limits::kMaxDm) return fail<ibv_dm>(EINVAL);
    auto *d = new (std::nothrow) Dm();
    if (!d) return fail<ibv_dm>(ENOMEM);
    proto::Request req{};
    proto::Response resp{};
    req.alloc_dm = {attr->length, attr->log_align_req, 0};
    int fd = -1;
    if (int e = ctx_of(c)->conn.call(proto::Op::AllocDm, req, resp, -1, &fd, 1)) {
        delete d;
        return fail<ibv_dm>(e);
    }
    if (fd < 0 || d->map.map(fd, attr->length)) {
        proto::Request f{};
        f.h.handle = resp.h.handle;
        ctx_of(c)->conn.call(proto::Op::FreeDm, f, resp);
        delete d;
        return fail<ibv_dm>(ENOMEM);
    }
    d->length = attr->length;
    d->dm.context = c;
    d->dm.memcpy_to_dm = to_dm;
    d->dm.memcpy_from_dm = from_dm;
    d->dm.comp_mask = 0;
    d->dm.handle = resp.h.handle;
    return &d->dm;
}

int free_dm(ibv_dm *ibdm) noexcept {
    if (!ibdm) return EINVAL;
    auto *d = reinterpret_cast<Dm *>(ibdm);
    proto::Request req{};
    proto::Response resp{};
    req.h.handle = ibdm->handle;
    if (int e = ctx_of(ibdm->context)->conn.call(proto::Op::FreeDm, req, resp); e && e != ENODEV) return e;
    d->map.unmap();
    delete d;
    return 0;
}

} // namespace simhca::lib

// Another context's view of a DM (see import.cpp): the same memfd, mapped again.
SIMHCA_API ibv_dm *ibv_import_dm(ibv_context *context, uint32_t dm_handle) noexcept {
    using namespace simhca::lib;
    if (!context) return fail<ibv_dm>(EINVAL);
    auto *d = new (std::nothrow) Dm();
    if (!d) return fail<ibv_dm>(ENOMEM);
    simhca::proto::Request req{};
    simhca::proto::Response resp{};
    req.h.handle = dm_handle;
    int fd = -1;
    if (int e = ctx_of(context)->conn.call(simhca::proto::Op::ImportDm, req, resp, -1, &fd, 1)) {
        delete d;
        return fail<ibv_dm>(e);
    }
    if (fd < 0 || d->map.map(fd, resp.import_dm.length)) {
        delete d;
        return fail<ibv_dm>(ENOMEM);
    }
    d->length = resp.import_dm.length;
    d->dm.context = context;
    d->dm.memcpy_to_dm = to_dm;
    d->dm.memcpy_from_dm = from_dm;
    d->dm.comp_mask = 0;
    d->dm.handle = dm_handle;
    return &d->dm;
}

// Frees only this context's mapping; the DM itself lives until ibv_free_dm.
SIMHCA_API void ibv_unimport_dm(ibv_dm *dm) noexcept {
    auto *d = reinterpret_cast<simhca::lib::Dm *>(dm);
    if (!d) return;
    d->map.unmap();
    delete d;
}

namespace simhca::lib {

ibv_mr *reg_dm_mr(ibv_pd *pd, ibv_dm *dm, uint64_t offset, size_t length, unsigned int access) noexcept {
    if (!pd || !dm) return fail<ibv_mr>(EINVAL);
    proto::Request req{};
    proto::Response resp{};
    req.reg_dm_mr = {pd->handle, dm->handle, int32_t(access), 0, offset, length};
    if (int e = ctx_of(pd->context)->conn.call(proto::Op::RegDmMr, req, resp)) return fail<ibv_mr>(e);
    auto *m = new (std::nothrow) Mr{};
    if (!m) return fail<ibv_mr>(ENOMEM);
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = reinterpret_cast<void *>(offset); // zero-based: addresses are offsets
    m->mr.length = length;
    m->mr.handle = resp.reg_mr.handle;
    m->mr.lkey = resp.reg_mr.lkey;
    m->mr.rkey = resp.reg_mr.rkey;
    return &m->mr;
}

} // namespace simhca::lib
