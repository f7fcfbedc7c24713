// SPDX-License-Identifier: BSD-3-Clause
// Sharing a context and its objects: ibv_import_device, ibv_import_pd / ibv_import_mr and their
// unimports (device memory: dm.cpp). Design in daemon/import.cpp: the cmd_fd is the owner's control
// socket; an imported context keeps the passed copy open and talks over its own connection, which the
// daemon lets act as the owner. Imports create only user-space objects for existing daemon objects;
// unimport frees only those, and the daemon object is destroyed once (dealloc/dereg by either context).
#include <cerrno>
#include <cstring>
#include <new>
#include <sys/stat.h>
#include <unistd.h>

#include "lib.hpp"

using namespace simhca;
using namespace simhca::lib;

SIMHCA_API ibv_context *ibv_import_device(int cmd_fd) noexcept {
    struct stat st;
    // rdma-core refuses anything but the uverbs character device; ours is a socket.
    if (cmd_fd < 0 || ::fstat(cmd_fd, &st) || !S_ISSOCK(st.st_mode)) return fail<ibv_context>(EINVAL);
    ibv_device *device = the_device();
    if (!device) return fail<ibv_context>(ENODEV);
    ibv_context *context = connect_context(device, proto::Op::ImportDevice, cmd_fd);
    if (!context) return nullptr;
    Context *c = ctx_of(context);
    // The application sees the fd it passed (it now belongs to this context, as in rdma-core).
    c->imported_cmd_fd = cmd_fd;
    c->vctx.context.cmd_fd = cmd_fd;
    return &c->vctx.context;
}

SIMHCA_API ibv_pd *ibv_import_pd(ibv_context *context, uint32_t pd_handle) noexcept {
    if (!context) return fail<ibv_pd>(EINVAL);
    proto::Request req{};
    proto::Response resp{};
    req.h.handle = pd_handle;
    if (int e = ctx_of(context)->conn.call(proto::Op::ImportPd, req, resp)) return fail<ibv_pd>(e);
    auto *p = new (std::nothrow) Pd{};
    if (!p) return fail<ibv_pd>(ENOMEM);
    p->pd.context = context;
    p->pd.handle = pd_handle;
    return &p->pd;
}

SIMHCA_API void ibv_unimport_pd(ibv_pd *pd) noexcept { delete reinterpret_cast<Pd *>(pd); }

SIMHCA_API ibv_mr *ibv_import_mr(ibv_pd *pd, uint32_t mr_handle) noexcept {
    if (!pd) return fail<ibv_mr>(EINVAL);
    proto::Request req{};
    proto::Response resp{};
    req.h.handle = mr_handle;
    if (int e = ctx_of(pd->context)->conn.call(proto::Op::ImportMr, req, resp)) return fail<ibv_mr>(e);
    auto *m = new (std::nothrow) Mr{};
    if (!m) return fail<ibv_mr>(ENOMEM);
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = nullptr; // as rdma-core's query: the address belongs to whoever registered it
    m->mr.length = resp.import_mr.length;
    m->mr.handle = mr_handle;
    m->mr.lkey = resp.import_mr.lkey;
    m->mr.rkey = resp.import_mr.rkey;
    return &m->mr;
}

SIMHCA_API void ibv_unimport_mr(ibv_mr *mr) noexcept { delete reinterpret_cast<Mr *>(mr); }
