// SPDX-License-Identifier: BSD-3-Clause
// The CM thread: what the kernel's CM does on the wire. It watches the ids' TCP sockets (listening
// sockets, outgoing connects, established exchanges) and turns the peer's frames into events: REQ ->
// CONNECT_REQUEST on a new child id, REP -> ESTABLISHED (QP moved to RTR/RTS, RTU sent) or
// CONNECT_RESPONSE, REJ -> REJECTED/UNREACHABLE, RTU -> ESTABLISHED, DREQ or a closed peer -> DISCONNECTED.
// Started on first use; a fork()ed child starts its own (the epoll set is not shared with the parent).
#include "cm.hpp"
#include "wire.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace simhca_cm {

int send_msg(Id &id, WireMsg &m) noexcept;
void fill_local(Id &id, WireMsg &m, MsgType type) noexcept;
void close_sock(Id &id) noexcept;

namespace {

void after_fork_in_child() noexcept
{
    auto &g = global();
    // The parent's thread does not exist here, and its epoll set is the parent's: start over.
    g.thread_running = false;
    if (g.epoll >= 0)
        close(g.epoll);
    g.epoll = -1;
}

Id *find_by_sock(int fd) noexcept
{
    for (Id *id : global().ids)
        if (id->sock == fd && id->state != State::Destroying)
            return id;
    return nullptr;
}

void padded_private(Event &ev, const WireMsg &m, unsigned size) noexcept
{
    ev.private_data.assign(size, 0);
    memcpy(ev.private_data.data(), m.private_data, std::min<unsigned>(m.private_len, size));
}

void store_peer(Id &id, const WireMsg &m) noexcept
{
    id.peer_known = true;
    id.peer.qpn = m.qpn;
    id.peer.psn = m.psn;
    id.peer.qkey = m.qkey;
    id.peer.lid = m.lid;
    memcpy(id.peer.gid.raw, m.gid, 16);
    id.peer.responder_resources = m.responder_resources;
    id.peer.initiator_depth = m.initiator_depth;
    id.peer.retry_count = m.retry_count;
    id.peer.rnr_retry_count = m.rnr_retry_count;
    id.peer.srq = m.srq;
    id.pub.route.addr.addr.ibaddr.dgid = id.peer.gid;
    id.path.dgid = id.peer.gid;
    id.path.dlid = htons(m.lid);
}

void fill_conn_event(Event &ev, const Id &id) noexcept
{
    ev.ev.param.conn.responder_resources = id.peer.responder_resources;
    ev.ev.param.conn.initiator_depth = id.peer.initiator_depth;
    ev.ev.param.conn.flow_control = 1;
    ev.ev.param.conn.retry_count = id.peer.retry_count;
    ev.ev.param.conn.rnr_retry_count = id.peer.rnr_retry_count;
    ev.ev.param.conn.srq = id.peer.srq;
    ev.ev.param.conn.qp_num = id.peer.qpn;
}

} // namespace

void report_connect_failure(Id &id, int err) noexcept
{
    // What the IB CM reports for a REQ that fails: nobody listening on the service (the TCP connect was
    // refused) is a REJ with "invalid service ID" (SIDR: "unsupported"); no answer at all is the REQ
    // timing out, UNREACHABLE with -ETIMEDOUT (-EHOSTUNREACH etc. as the network says); a requester whose
    // peer went away before answering gets the consumer's reject.
    close_sock(id);
    id.state = State::Rejected;
    bool rc = connected_ps(id);
    if (err == ECONNREFUSED)
        queue_event(*id.channel, rc ? make_event(id, RDMA_CM_EVENT_REJECTED, kRejInvalidServiceId)
                                    : make_event(id, RDMA_CM_EVENT_UNREACHABLE, kSidrUnsupported));
    else if (err == 0)
        queue_event(*id.channel, rc ? make_event(id, RDMA_CM_EVENT_REJECTED, kRejConsumerDefined)
                                    : make_event(id, RDMA_CM_EVENT_UNREACHABLE, kSidrReject));
    else
        queue_event(*id.channel, make_event(id, RDMA_CM_EVENT_UNREACHABLE, -err));
}

namespace {

// The TCP connection ended or failed: what that means depends on where the exchange was.
void on_hangup(Id &id, int err = 0) noexcept
{
    State st = id.state;
    if (st == State::Connecting) {
        report_connect_failure(id, err);
        return;
    }
    close_sock(id);
    switch (st) {
    case State::Incoming: // the requester went away before its REQ: nothing was reported yet
        id.state = State::Disconnected;
        break;
    // Neither case touches the id's QP: this thread runs beside the application, which may already have
    // destroyed it (ibv_destroy_qp while the peer exits). The kernel's CM does not move a user QP on a DREQ
    // either; the application answers DISCONNECTED with rdma_disconnect, which moves it to ERR.
    case State::Accepted: // the RTU never came
        id.state = State::Disconnected;
        queue_event(*id.channel, make_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -ETIMEDOUT));
        break;
    case State::Connected:
    case State::RepReceived:
        // The kernel's CM sends a DREQ when the peer's id (or process) goes away.
        id.state = State::Disconnected;
        if (connected_ps(id))
            queue_event(*id.channel, make_event(id, RDMA_CM_EVENT_DISCONNECTED));
        break;
    case State::ReqReceived: // the requester gave up; the application still holds the request
    default:
        break;
    }
}

void on_req(Id &id, const WireMsg &m) noexcept
{
    Id *listener = id.listener;
    if (m.port_space != listener->pub.ps) {
        // TCP and UDP port P are different service IDs to the IB CM: a listener on the other port space
        // is nobody listening on this one (REJ "invalid service ID", or SIDR status "unsupported").
        send_reject(id, nullptr, 0, m.connected ? kRejInvalidServiceId : kSidrUnsupported);
        id.state = State::Disconnected; // nothing was reported: reap_unreported() frees it
        return;
    }
    store_peer(id, m);
    id.state = State::ReqReceived;
    auto ev = make_event(id, RDMA_CM_EVENT_CONNECT_REQUEST);
    if (!ev)
        return;
    ev->ev.listen_id = &listener->pub;
    ev->listen_owner = listener;
    if (connected_ps(id)) {
        padded_private(*ev, m, kReqPrivate);
        fill_conn_event(*ev, id);
    } else {
        padded_private(*ev, m, kSidrReqPrivate);
        fill_ud_ah(id, ev->ev.param.ud.ah_attr);
        ev->ev.param.ud.qp_num = m.qpn;
        ev->ev.param.ud.qkey = m.qkey;
    }
    // A synchronous listener's requests are returned by rdma_get_request on the listener's channel.
    queue_event(*listener->channel, std::move(ev));
}

void on_rep(Id &id, const WireMsg &m) noexcept
{
    store_peer(id, m);
    if (!connected_ps(id)) {
        // SIDR REP: the remote QP and Q_Key; nothing more to exchange.
        close_sock(id);
        id.state = State::Connected;
        auto ev = make_event(id, RDMA_CM_EVENT_ESTABLISHED);
        if (!ev)
            return;
        padded_private(*ev, m, kSidrRepPrivate);
        fill_ud_ah(id, ev->ev.param.ud.ah_attr);
        ev->ev.param.ud.qp_num = m.qpn;
        ev->ev.param.ud.qkey = m.qkey;
        queue_event(*id.channel, std::move(ev));
        return;
    }
    if (!id.pub.qp) {
        // No QP on the id: the application moves its own QP and calls rdma_establish.
        id.state = State::RepReceived;
        auto ev = make_event(id, RDMA_CM_EVENT_CONNECT_RESPONSE);
        if (!ev)
            return;
        padded_private(*ev, m, kRepPrivate);
        fill_conn_event(*ev, id);
        queue_event(*id.channel, std::move(ev));
        return;
    }
    int err = qp_to_rtr(id, id.pub.qp);
    if (!err)
        err = qp_to_rts(id, id.pub.qp);
    if (err) {
        WireMsg rej{};
        fill_local(id, rej, MsgType::Rej);
        rej.status = kRejConsumerDefined;
        send_msg(id, rej);
        close_sock(id);
        id.state = State::Disconnected;
        queue_event(*id.channel, make_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -err));
        return;
    }
    WireMsg rtu{};
    fill_local(id, rtu, MsgType::Rtu);
    send_msg(id, rtu);
    id.state = State::Connected;
    auto ev = make_event(id, RDMA_CM_EVENT_ESTABLISHED);
    if (!ev)
        return;
    padded_private(*ev, m, kRepPrivate);
    fill_conn_event(*ev, id);
    queue_event(*id.channel, std::move(ev));
}

void on_rej(Id &id, const WireMsg &m) noexcept
{
    close_sock(id);
    id.state = State::Rejected;
    auto ev = connected_ps(id) ? make_event(id, RDMA_CM_EVENT_REJECTED, m.status)
                               : make_event(id, RDMA_CM_EVENT_UNREACHABLE, m.status);
    if (!ev)
        return;
    padded_private(*ev, m, connected_ps(id) ? kRejPrivate : kSidrRepPrivate);
    queue_event(*id.channel, std::move(ev));
}

void on_frame(Id &id, const WireMsg &m) noexcept
{
    switch (m.type) {
    case MsgType::Req:
        if (id.state == State::Incoming)
            on_req(id, m);
        break;
    case MsgType::Rep:
        if (id.state == State::Connecting)
            on_rep(id, m);
        break;
    case MsgType::Rej:
        if (id.state == State::Connecting)
            on_rej(id, m);
        break;
    case MsgType::Rtu:
        if (id.state == State::Accepted) {
            id.state = State::Connected;
            queue_event(*id.channel, make_event(id, RDMA_CM_EVENT_ESTABLISHED));
        }
        break;
    case MsgType::Dreq:
        on_hangup(id);
        break;
    }
}

void on_listen_ready(Id &listener) noexcept
{
    for (;;) {
        sockaddr_storage peer{};
        socklen_t len = sizeof(peer);
        int fd = accept4(listener.sock, reinterpret_cast<sockaddr *>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        auto *child = new (std::nothrow) Id;
        if (!child) {
            close(fd);
            continue;
        }
        child->state = State::Incoming;
        child->listener = &listener;
        child->passive = true;
        child->sock = fd;
        child->pub.context = listener.pub.context;
        child->pub.ps = listener.pub.ps;
        child->pub.qp_type = listener.pub.qp_type;
        child->ack_timeout = listener.ack_timeout;
        child->psn = static_cast<uint32_t>(random()) & 0xffffff;
        socklen_t slen = sizeof(child->pub.route.addr.src_storage);
        getsockname(fd, &child->pub.route.addr.src_addr, &slen);
        memcpy(&child->pub.route.addr.dst_storage, &peer, len);
        if (listener.sync) {
            // librdmacm migrates a synchronous listener's new ids to their own channel.
            child->channel = new_channel();
            child->sync = true;
        } else {
            child->channel = listener.channel;
        }
        if (!child->channel || attach_device(*child) != 0) {
            if (child->sync)
                free_channel(child->channel);
            close(fd);
            delete child;
            continue;
        }
        child->pub.channel = &child->channel->pub;
        child->path.sgid = global().gid;
        child->path.slid = htons(global().lid);
        child->path.pkey = htons(0xffff);
        child->path.mtu = global().mtu;
        child->pub.route.path_rec = &child->path;
        child->pub.route.num_paths = 1;
        global().ids.push_back(child);
        watch(*child, false);
    }
}

void on_ready(Id &id, uint32_t events) noexcept
{
    if (id.state == State::Listening) {
        on_listen_ready(id);
        return;
    }
    if (id.connecting_tcp) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(id.sock, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err || (events & (EPOLLERR | EPOLLHUP))) {
            on_hangup(id, err ? err : ECONNREFUSED);
            return;
        }
        id.connecting_tcp = false;
        WireMsg req{};
        fill_local(id, req, MsgType::Req);
        if (send_msg(id, req) != 0) {
            on_hangup(id);
            return;
        }
        watch(id, false);
        return;
    }
    for (;;) {
        uint8_t buf[4096];
        ssize_t n = recv(id.sock, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            // Frames that arrived before the close still count (a REJ then FIN, say).
            while (id.rx.size() >= sizeof(WireMsg) && id.sock >= 0) {
                WireMsg m;
                memcpy(&m, id.rx.data(), sizeof(m));
                id.rx.erase(id.rx.begin(), id.rx.begin() + sizeof(m));
                if (m.magic == kMagic)
                    on_frame(id, m);
            }
            if (id.sock >= 0)
                on_hangup(id);
            return;
        }
        if (n < 0)
            break;
        id.rx.insert(id.rx.end(), buf, buf + n);
    }
    while (id.rx.size() >= sizeof(WireMsg) && id.sock >= 0) {
        WireMsg m;
        memcpy(&m, id.rx.data(), sizeof(m));
        id.rx.erase(id.rx.begin(), id.rx.begin() + sizeof(m));
        if (m.magic != kMagic) {
            on_hangup(id);
            return;
        }
        on_frame(id, m);
    }
}

// Children of a listener whose requester went away, or asked for another port space, before anything was
// reported: nobody else knows them, so they go at once (a listener probed by many peers does not grow).
void reap_unreported() noexcept
{
    auto &ids = global().ids;
    for (auto it = ids.begin(); it != ids.end();) {
        Id *id = *it;
        if (id->passive && id->state == State::Disconnected && !id->handed_out && id->events_out == 0 &&
            id->sock < 0 && !id->sync) {
            drop_events_of(*id);
            it = ids.erase(it);
            delete id;
        } else {
            ++it;
        }
    }
}

void run(int ep) noexcept
{
    for (;;) {
        epoll_event evs[16];
        int n = epoll_wait(ep, evs, 16, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        std::lock_guard lk(global().mu);
        if (global().epoll != ep)
            return; // forked: this thread is not ours (cannot happen in the child, kept for safety)
        for (int i = 0; i < n; ++i) {
            Id *id = find_by_sock(evs[i].data.fd);
            if (id)
                on_ready(*id, evs[i].events);
        }
        reap_unreported();
    }
}

} // namespace

int send_msg(Id &id, WireMsg &m) noexcept
{
    if (id.sock < 0)
        return ENOTCONN;
    const auto *p = reinterpret_cast<const uint8_t *>(&m);
    size_t left = sizeof(m);
    while (left) {
        ssize_t n = send(id.sock, p, left, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                usleep(100); // a few hundred bytes into an empty socket buffer: practically never
                continue;
            }
            return errno;
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
    return 0;
}

int send_reject(Id &id, const void *data, uint8_t len, int status) noexcept
{
    WireMsg m{};
    id.my_private.assign(static_cast<const uint8_t *>(data), static_cast<const uint8_t *>(data) + (data ? len : 0));
    fill_local(id, m, MsgType::Rej);
    m.status = status;
    int err = send_msg(id, m);
    close_sock(id);
    id.state = State::Rejected;
    return err;
}

void fill_local(Id &id, WireMsg &m, MsgType type) noexcept
{
    auto &g = global();
    m.magic = kMagic;
    m.type = type;
    m.qpn = id.pub.qp ? id.pub.qp->qp_num : id.my_conn.qp_num;
    m.psn = id.psn;
    m.qkey = id.pub.ps == RDMA_PS_IPOIB ? RDMA_IPOIB_QKEY : RDMA_UDP_QKEY;
    m.lid = g.lid;
    memcpy(m.gid, g.gid.raw, 16);
    m.responder_resources = id.my_conn.responder_resources;
    m.initiator_depth = id.my_conn.initiator_depth;
    m.retry_count = id.my_conn.retry_count;
    m.rnr_retry_count = id.my_conn.rnr_retry_count;
    m.srq = id.my_conn.srq || id.pub.srq;
    m.connected = connected_ps(id);
    m.port_space = static_cast<uint16_t>(id.pub.ps);
    m.private_len = static_cast<uint8_t>(std::min<size_t>(id.my_private.size(), sizeof(m.private_data)));
    memcpy(m.private_data, id.my_private.data(), m.private_len);
}

void close_sock(Id &id) noexcept
{
    if (id.sock < 0)
        return;
    unwatch(id);
    close(id.sock);
    id.sock = -1;
    id.rx.clear();
    id.connecting_tcp = false;
}

int watch(Id &id, bool want_write) noexcept
{
    auto &g = global();
    if (g.epoll < 0) {
        static bool atfork_done = false;
        if (!atfork_done) {
            pthread_atfork(nullptr, nullptr, after_fork_in_child);
            atfork_done = true;
        }
        g.epoll = epoll_create1(EPOLL_CLOEXEC);
        if (g.epoll < 0)
            return errno;
    }
    if (!g.thread_running) {
        try {
            std::thread(run, g.epoll).detach();
        } catch (...) {
            return EAGAIN;
        }
        g.thread_running = true;
    }
    epoll_event ev{};
    ev.events = want_write ? EPOLLOUT : EPOLLIN;
    ev.data.fd = id.sock;
    if (epoll_ctl(g.epoll, EPOLL_CTL_MOD, id.sock, &ev) != 0 && epoll_ctl(g.epoll, EPOLL_CTL_ADD, id.sock, &ev) != 0)
        return errno;
    return 0;
}

void unwatch(Id &id) noexcept
{
    auto &g = global();
    if (g.epoll >= 0 && id.sock >= 0)
        epoll_ctl(g.epoll, EPOLL_CTL_DEL, id.sock, nullptr);
}

} // namespace simhca_cm
