// SPDX-License-Identifier: BSD-3-Clause
// CM ids and addresses: rdma_create_id, rdma_destroy_id, rdma_bind_addr, rdma_resolve_addr,
// rdma_resolve_route, rdma_set_option, rdma_migrate_id, rdma_get_src/dst_port, rdma_get/free_devices.
// An id's RDMA port is the TCP port of its socket on the same IP: binding reserves it (EADDRINUSE as
// the kernel's CM reports), and the connection exchange runs on it (see connect.cpp).
#include "cm.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace simhca_cm {

socklen_t addr_len(const sockaddr *sa) noexcept
{
    if (!sa)
        return 0;
    if (sa->sa_family == AF_INET)
        return sizeof(sockaddr_in);
    if (sa->sa_family == AF_INET6)
        return sizeof(sockaddr_in6);
    return 0;
}

bool is_wildcard(const sockaddr *sa) noexcept
{
    if (sa->sa_family == AF_INET)
        return reinterpret_cast<const sockaddr_in *>(sa)->sin_addr.s_addr == htonl(INADDR_ANY);
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_addr);
    return true;
}

uint16_t port_of(const sockaddr *sa) noexcept
{
    if (sa->sa_family == AF_INET)
        return ntohs(reinterpret_cast<const sockaddr_in *>(sa)->sin_port);
    if (sa->sa_family == AF_INET6)
        return ntohs(reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_port);
    return 0;
}

int ensure_device() noexcept
{
    auto &g = global();
    if (g.verbs)
        return 0;
    int n = 0;
    ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        if (list)
            ibv_free_device_list(list);
        return ENODEV;
    }
    // One device per node: every local IP address maps to its port 1 (as IPoIB on an HCA's first port).
    ibv_context *ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    if (!ctx)
        return errno ? errno : ENODEV;
    ibv_pd *pd = ibv_alloc_pd(ctx);
    ibv_port_attr pattr{};
    ibv_device_attr dattr{};
    if (!pd || ibv_query_port(ctx, 1, &pattr) || ibv_query_gid(ctx, 1, 0, &g.gid) || ibv_query_device(ctx, &dattr)) {
        int err = errno ? errno : ENODEV;
        if (pd)
            ibv_dealloc_pd(pd);
        ibv_close_device(ctx);
        return err;
    }
    g.verbs = ctx;
    g.pd = pd;
    g.lid = pattr.lid;
    g.mtu = pattr.active_mtu;
    g.max_rd_atomic = static_cast<uint8_t>(std::min(dattr.max_qp_rd_atom, 16));
    return 0;
}

int attach_device(Id &id) noexcept
{
    if (int err = ensure_device())
        return err;
    auto &g = global();
    id.pub.verbs = g.verbs;
    id.pub.pd = g.pd;
    id.pub.port_num = 1;
    id.pub.route.addr.addr.ibaddr.sgid = g.gid;
    id.pub.route.addr.addr.ibaddr.pkey = htons(0xffff);
    return 0;
}

// Reserve the RDMA port: a TCP socket bound to the address (port 0 = the kernel picks one).
static int bind_socket(Id &id, const sockaddr *addr) noexcept
{
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    int one = 1;
    // A test's listener must be able to take the port again while the previous connection's TCP socket
    // sits in TIME_WAIT (the RDMA CM has no such wait on its ports).
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (addr->sa_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, addr, addr_len(addr)) != 0) {
        int err = errno;
        close(fd);
        return err;
    }
    socklen_t len = sizeof(id.pub.route.addr.src_storage);
    getsockname(fd, &id.pub.route.addr.src_addr, &len);
    id.sock = fd;
    return 0;
}

// The source address the routing table picks for `dst` (what the kernel's CM does without a source).
static bool route_source(const sockaddr *dst, sockaddr_storage &src) noexcept
{
    int fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    bool ok = connect(fd, dst, addr_len(dst)) == 0;
    socklen_t len = sizeof(src);
    ok = ok && getsockname(fd, reinterpret_cast<sockaddr *>(&src), &len) == 0;
    close(fd);
    if (ok) {
        if (src.ss_family == AF_INET)
            reinterpret_cast<sockaddr_in *>(&src)->sin_port = 0;
        else
            reinterpret_cast<sockaddr_in6 *>(&src)->sin6_port = 0;
    }
    return ok;
}

// Is `a` an address of this node? (Binding a socket to it succeeds.)
static bool is_local(const sockaddr *a) noexcept
{
    sockaddr_storage copy{};
    memcpy(&copy, a, addr_len(a));
    if (copy.ss_family == AF_INET)
        reinterpret_cast<sockaddr_in *>(&copy)->sin_port = 0;
    else
        reinterpret_cast<sockaddr_in6 *>(&copy)->sin6_port = 0;
    int fd = socket(a->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    bool ok = bind(fd, reinterpret_cast<sockaddr *>(&copy), addr_len(a)) == 0;
    close(fd);
    return ok;
}

int bind_id(Id &id, const sockaddr *addr) noexcept
{
    if (id.state != State::Idle)
        return EINVAL;
    if (!addr_len(addr))
        return addr && addr->sa_family == AF_IB ? EAFNOSUPPORT : EINVAL;
    if (int err = bind_socket(id, addr))
        return err;
    // A wildcard bind does not choose a device (as the kernel's CM); a specific address does.
    if (!is_wildcard(addr)) {
        if (int err = attach_device(id)) {
            close(id.sock);
            id.sock = -1;
            return err;
        }
    }
    id.state = State::Bound;
    return 0;
}

} // namespace simhca_cm

using namespace simhca_cm;

extern "C" {

int rdma_create_id(rdma_event_channel *channel, rdma_cm_id **id, void *context, enum rdma_port_space ps)
{
    if (!id)
        return fail(EINVAL);
    if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IPOIB && ps != RDMA_PS_IB)
        return fail(EINVAL);
    auto *p = new (std::nothrow) Id;
    if (!p)
        return fail(ENOMEM);
    if (channel) {
        p->channel = reinterpret_cast<Channel *>(channel);
    } else {
        // No channel: a synchronous id, with a private channel its calls wait on.
        p->channel = new_channel();
        p->sync = true;
        if (!p->channel) {
            delete p;
            return fail(ENOMEM);
        }
    }
    p->pub.channel = &p->channel->pub;
    p->pub.context = context;
    p->pub.ps = ps;
    p->pub.qp_type = (ps == RDMA_PS_TCP || ps == RDMA_PS_IB) ? IBV_QPT_RC : IBV_QPT_UD;
    p->psn = static_cast<uint32_t>(random()) & 0xffffff;
    std::lock_guard lk(global().mu);
    global().ids.push_back(p);
    *id = &p->pub;
    return 0;
}

int rdma_destroy_id(rdma_cm_id *id)
{
    if (!id)
        return fail(EINVAL);
    std::unique_lock lk(global().mu);
    return destroy_locked(reinterpret_cast<Id *>(id), lk);
}

int rdma_bind_addr(rdma_cm_id *id, sockaddr *addr)
{
    if (!id || !addr)
        return fail(EINVAL);
    std::lock_guard lk(global().mu);
    int err = bind_id(*reinterpret_cast<Id *>(id), addr);
    return err ? fail(err) : 0;
}

int rdma_resolve_addr(rdma_cm_id *cid, sockaddr *src_addr, sockaddr *dst_addr, int /*timeout_ms*/)
{
    if (!cid || !addr_len(dst_addr))
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    std::unique_lock lk(global().mu);
    if (id.state == State::Idle) {
        sockaddr_storage src{};
        if (src_addr && addr_len(src_addr)) {
            memcpy(&src, src_addr, addr_len(src_addr));
        } else if (!route_source(dst_addr, src)) {
            src.ss_family = dst_addr->sa_family; // wildcard: the kernel chooses at connect time
        }
        if (int err = bind_id(id, reinterpret_cast<sockaddr *>(&src)))
            return fail(err);
    } else if (id.state != State::Bound) {
        return fail(EINVAL);
    }
    if (is_wildcard(&id.pub.route.addr.src_addr)) {
        // Bound to a wildcard: report the source the routing table picks, keep the reserved port.
        sockaddr_storage src{};
        if (route_source(dst_addr, src)) {
            uint16_t port = htons(port_of(&id.pub.route.addr.src_addr));
            memcpy(&id.pub.route.addr.src_storage, &src, sizeof(src));
            if (src.ss_family == AF_INET)
                id.pub.route.addr.src_sin.sin_port = port;
            else
                id.pub.route.addr.src_sin6.sin6_port = port;
        }
    }
    memset(&id.pub.route.addr.dst_storage, 0, sizeof(id.pub.route.addr.dst_storage));
    memcpy(&id.pub.route.addr.dst_storage, dst_addr, addr_len(dst_addr));
    if (int err = attach_device(id))
        return fail(err);
    // The destination's GID: ours when the address is on this node (one HCA per node); another node's
    // is learnt in the connection exchange.
    if (is_local(dst_addr))
        id.pub.route.addr.addr.ibaddr.dgid = global().gid;
    id.state = State::AddrResolved;
    queue_event(*id.channel, make_event(id, RDMA_CM_EVENT_ADDR_RESOLVED));
    return id.sync ? complete_sync(lk, id) : 0;
}

int rdma_resolve_route(rdma_cm_id *cid, int /*timeout_ms*/)
{
    if (!cid)
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    std::unique_lock lk(global().mu);
    if (id.state != State::AddrResolved)
        return fail(EINVAL);
    auto &g = global();
    ibv_sa_path_rec &p = id.path;
    p = {};
    p.sgid = id.pub.route.addr.addr.ibaddr.sgid;
    p.dgid = id.pub.route.addr.addr.ibaddr.dgid;
    p.slid = htons(g.lid);
    p.dlid = memcmp(&p.dgid, &g.gid, sizeof(p.dgid)) == 0 ? htons(g.lid) : 0;
    p.pkey = htons(0xffff);
    p.mtu = g.mtu;
    p.mtu_selector = 2;
    p.numb_path = 1;
    p.reversible = 1;
    p.hop_limit = 0;
    p.packet_life_time = 14;
    id.pub.route.path_rec = &id.path;
    id.pub.route.num_paths = 1;
    id.state = State::RouteResolved;
    queue_event(*id.channel, make_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED));
    return id.sync ? complete_sync(lk, id) : 0;
}

int rdma_set_option(rdma_cm_id *cid, int level, int optname, void *optval, size_t optlen)
{
    if (!cid || !optval)
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    std::lock_guard lk(global().mu);
    if (level == RDMA_OPTION_ID) {
        switch (optname) {
        case RDMA_OPTION_ID_TOS:
            if (optlen != sizeof(uint8_t))
                return fail(EINVAL);
            id.tos = *static_cast<uint8_t *>(optval);
            return 0;
        case RDMA_OPTION_ID_REUSEADDR:
        case RDMA_OPTION_ID_AFONLY:
            if (optlen != sizeof(int))
                return fail(EINVAL);
            return 0; // our ports always allow reuse after close; AF_INET6 sockets are v6-only
        case RDMA_OPTION_ID_ACK_TIMEOUT:
            if (optlen != sizeof(uint8_t))
                return fail(EINVAL);
            id.ack_timeout = *static_cast<uint8_t *>(optval) & 0x1f;
            id.ack_timeout_set = true;
            // The kernel applies it to a QP that is already past RTS on the next transition only.
            return 0;
        }
        return fail(ENOSYS);
    }
    if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) {
        if (optlen == 0 || optlen % sizeof(ibv_path_data) != 0)
            return fail(EINVAL);
        return 0; // one subnet: the path we resolved is the only one
    }
    return fail(ENOSYS);
}

int rdma_migrate_id(rdma_cm_id *cid, rdma_event_channel *channel)
{
    if (!cid)
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    auto &g = global();
    Channel *target = channel ? reinterpret_cast<Channel *>(channel) : new_channel();
    if (!target)
        return fail(ENOMEM);
    std::unique_lock lk(g.mu);
    // As librdmacm: every event of the id that was handed out must be acked before it moves.
    if (id.pub.event && id.sync) {
        auto *ev = reinterpret_cast<Event *>(id.pub.event);
        id.pub.event = nullptr;
        ev->owner->events_out--;
        delete ev;
    }
    g.cv.wait(lk, [&] { return id.events_out == 0; });
    Channel *old = id.channel;
    // Queued events follow the id to its new channel.
    for (auto it = old->queue.begin(); it != old->queue.end();) {
        if ((*it)->owner == &id) {
            auto ev = std::move(*it);
            it = old->queue.erase(it);
            char b;
            (void)!recv(old->pub.fd, &b, 1, MSG_DONTWAIT);
            queue_event(*target, std::move(ev));
        } else {
            ++it;
        }
    }
    bool was_sync = id.sync;
    id.channel = target;
    id.pub.channel = &target->pub;
    id.sync = channel == nullptr;
    if (was_sync)
        free_channel(old);
    return 0;
}

__be16 rdma_get_src_port(rdma_cm_id *id)
{
    return id ? htons(port_of(&id->route.addr.src_addr)) : 0;
}

__be16 rdma_get_dst_port(rdma_cm_id *id)
{
    return id ? htons(port_of(&id->route.addr.dst_addr)) : 0;
}

ibv_context **rdma_get_devices(int *num_devices)
{
    std::lock_guard lk(global().mu);
    int err = ensure_device();
    int n = err ? 0 : 1;
    auto **list = static_cast<ibv_context **>(calloc(n + 1, sizeof(ibv_context *)));
    if (!list) {
        errno = ENOMEM;
        return nullptr;
    }
    if (n)
        list[0] = global().verbs;
    if (num_devices)
        *num_devices = n;
    return list;
}

void rdma_free_devices(ibv_context **list)
{
    free(list); // the contexts stay open: they belong to the library, as in librdmacm
}

} // extern "C"
