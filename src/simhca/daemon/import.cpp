// SPDX-License-Identifier: BSD-3-Clause
// Object import (ibv_import_device / ibv_import_pd / ibv_import_mr / ibv_import_dm).
//
// A context's cmd_fd is its control socket. As with the uverbs file, every copy of that fd (dup, fork,
// SCM_RIGHTS) keeps the same socket open, and the daemon releases the context's objects only when the
// last copy is closed (it sees the hang-up then). An imported context cannot share the socket itself for
// requests (two contexts' request/reply pairs would interleave), so it opens its own connection and
// presents the passed fd: that connection then acts as the owning client, like a forked child's (Join),
// while the passed fd, kept by the imported context, keeps the objects alive.
// Importing an object only looks it up in that client; nothing is created, and the object is destroyed
// once, by whichever context destroys it.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../common/limits.hpp"
#include "../common/socket_io.hpp"
#include "device.hpp"

namespace simhca {

using namespace proto;

namespace {

// The abstract name a socket is bound to ("" when none or not a UNIX socket).
std::string bound_name(int fd, bool peer) {
    sockaddr_un a{};
    socklen_t len = sizeof(a);
    int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr *>(&a), &len)
                  : ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
    if (rc < 0 || a.sun_family != AF_UNIX || len <= offsetof(sockaddr_un, sun_path) + 1 || a.sun_path[0] != '\0')
        return {};
    return std::string(a.sun_path, len - offsetof(sockaddr_un, sun_path));
}

// True when the library's end of the socket is closed everywhere (the hang-up may not be handled yet).
bool hung_up(int sock) {
    pollfd p{sock, POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

}  // namespace

int Device::make_event_pipe(Client &c) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) < 0) return errno;
    c.async_rd.reset(p[0]);
    c.async_wr.reset(p[1]);
    ::fcntl(p[1], F_SETFL, O_NONBLOCK);  // a client that never reads its events cannot stall the HCA
    return 0;
}

int Device::do_import_device(Client &conn, int fd, Response &r, std::vector<int> &fds) {
    if (conn.async_wr || conn.alias_of || conn.is_ctl) return EALREADY;
    if (fd < 0) return EBADF;
    // The passed fd must be a connection to this daemon; its own end's name identifies the context.
    sockaddr_un me;
    socklen_t me_len = daemon_address(me);
    std::string ours(me.sun_path, me_len - offsetof(sockaddr_un, sun_path));
    std::string name = bound_name(fd, false);
    if (name.empty() || bound_name(fd, true) != ours) return EINVAL;  // not a cmd_fd of this device
    Client *t = nullptr;
    for (auto &[id, c] : objs_.clients)
        if (c.get() != &conn && c->sock_name == name && !c->alias_of && !c->is_ctl) t = c.get();
    // A stale name (its socket closed, the hang-up not handled yet) could be reused by another socket.
    if (!t || !t->async_wr || hung_up(t->sock.get())) return EINVAL;
    if (int e = make_event_pipe(conn)) return e;
    conn.alias_of = t->id;
    r.hello.client_id = t->id;
    r.hello.secret = t->secret;  // a fork()ed child of the importer joins with it (Conn::rejoin)
    r.hello.lid = objs_.cfg.lid;
    r.hello.port_state = objs_.port_state;
    r.hello.node_guid = __builtin_bswap64(limits::node_guid_for_lid(objs_.cfg.lid));
    std::snprintf(r.hello.node_name, sizeof(r.hello.node_name), "%s", objs_.cfg.node.c_str());
    std::snprintf(r.hello.sysfs_dir, sizeof(r.hello.sysfs_dir), "%s", objs_.cfg.sysfs_dir.c_str());
    // Its own event pipe (port and object events go to the owner's, as they go to the kernel's default
    // async file), the owner's doorbell (the owner's QPs are the ones it posts to) and the awake word.
    fds = {conn.async_rd.get(), t->doorbell.get()};
    if (doorbells_.awake_fd() >= 0) fds.push_back(doorbells_.awake_fd());
    return 0;
}

// What a lookup by handle fails with in uverbs: ENOENT when the context has no such object, EINVAL when
// the handle names an object of another type (handles are one number space per context, as here).
int Device::missing_object_error(Client &c, uint32_t h) const {
    auto mine = [&](const auto &m) {
        auto it = m.find(h);
        return it != m.end() && it->second->owner == &c;
    };
    if (mine(objs_.pds) || mine(objs_.mrs) || mine(objs_.mws) || mine(objs_.dms) || mine(objs_.channels) ||
        mine(objs_.cqs) || mine(objs_.xrcd_handles) || mine(objs_.srqs) || mine(objs_.qp_handles))
        return EINVAL;
    return ENOENT;
}

int Device::do_import_pd(Client &c, uint32_t h) {
    return objs_.owned(objs_.pds, c, h) ? 0 : missing_object_error(c, h);
}

int Device::do_import_mr(Client &c, uint32_t h, Response &r) {
    Mr *mr = objs_.owned(objs_.mrs, c, h);
    if (!mr) return missing_object_error(c, h);
    r.import_mr = {mr->id, mr->key, mr->key, 0, mr->length};
    return 0;
}

int Device::do_import_dm(Client &c, uint32_t h, Response &r, std::vector<int> &fds) {
    Dm *d = objs_.owned(objs_.dms, c, h);
    if (!d) return missing_object_error(c, h);
    r.import_dm = {d->id, 0, d->length};
    fds = {d->shm.fd()};
    return 0;
}

}  // namespace simhca
