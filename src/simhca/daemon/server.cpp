// SPDX-License-Identifier: BSD-3-Clause
#include "server.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "../common/socket_io.hpp"
#include "clock.hpp"

namespace simhca {

namespace {
enum Kind : uint32_t { kListen = 1, kSignal, kClientSock, kDoorbell, kNet };
uint64_t tag(uint32_t kind, uint32_t id) {
    return (uint64_t(kind) << 32) | id;
}
}  // namespace

void Server::watch(int fd, uint32_t kind, uint32_t id) {
    epoll_event ev{};
    // Doorbells are edge-triggered: every eventfd write is a new edge, so the daemon never has to read the
    // counter back (one syscall less per doorbell); on_doorbell scans all of the client's QPs anyway.
    ev.events = EPOLLIN | (kind == kDoorbell ? uint32_t(EPOLLET) : 0u);
    ev.data.u64 = tag(kind, id);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
}

int Server::listen(const std::vector<FabricNode> &nodes) {
    listen_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!listen_) return errno;
    sockaddr_un addr;
    socklen_t len = daemon_address(addr);
    if (::bind(listen_.get(), reinterpret_cast<sockaddr *>(&addr), len) < 0) return errno;
    if (::listen(listen_.get(), 128) < 0) return errno;
    epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) return errno;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    signals_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!signals_) return errno;
    ::signal(SIGPIPE, SIG_IGN);
    watch(listen_.get(), kListen, 0);
    watch(signals_.get(), kSignal, 0);
    if (!nodes.empty()) {
        net_ = std::make_unique<Network>(dev_.objects(), dev_.responder(), dev_.completer(), nodes, epoll_.get(), kNet);
        if (int e = net_->listen()) return e;
        dev_.set_network(net_.get());
    }
    return 0;
}

void Server::accept_clients() {
    for (;;) {
        UniqueFd s(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!s) return;
        ucred cred{};
        socklen_t cl = sizeof(cred);
        if (::getsockopt(s.get(), SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) continue;
        int fd = s.get();
        Client &c = dev_.add_client(std::move(s), cred.pid, cred.uid);
        sockaddr_un peer{};
        socklen_t pl = sizeof(peer);
        if (::getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &pl) == 0 && pl > offsetof(sockaddr_un, sun_path))
            c.sock_name.assign(peer.sun_path, pl - offsetof(sockaddr_un, sun_path));
        watch(fd, kClientSock, c.id);
    }
}

void Server::drop_client(uint32_t id) {
    Client *c = dev_.client(id);
    if (!c) return;
    // Unregister explicitly: the library holds dups of the doorbell, so the
    // epoll registration would outlive our close() otherwise.
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->sock.get(), nullptr);
    if (c->doorbell) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->doorbell.get(), nullptr);
    dev_.remove_client(id);
}

void Server::on_client_readable(uint32_t id) {
    Client *c = dev_.client(id);
    if (!c) return;
    for (;;) {
        proto::Request req;
        std::memset(&req, 0, sizeof(req));
        int fds[4];
        long n = recv_with_fds(c->sock.get(), &req, sizeof(req), fds, 4);
        if (n == -EAGAIN) return;
        if (n <= 0 || size_t(n) < offsetof(proto::Request, raw)) {
            for (int fd : fds)
                if (fd >= 0) ::close(fd);
            drop_client(id);
            return;
        }
        // Only OpenXrcd and ImportDevice may carry an fd; anything else is closed at once.
        if (req.op != uint32_t(proto::Op::OpenXrcd) && req.op != uint32_t(proto::Op::ImportDevice))
            for (int &fd : fds)
                if (fd >= 0) ::close(fd), fd = -1;
        for (int i = 1; i < 4; ++i)
            if (fds[i] >= 0) ::close(fds[i]), fds[i] = -1;
        auto resp = std::make_unique<proto::Response>();
        std::vector<int> out;
        bool had_doorbell = bool(c->doorbell);
        dev_.handle(*c, req, fds, *resp, out);
        if (!had_doorbell && c->doorbell) watch(c->doorbell.get(), kDoorbell, id);
        if (resp->err) out.clear();
        int sent;
        if (!resp->err && (req.op == uint32_t(proto::Op::Status) || req.op == uint32_t(proto::Op::ListObjects))) {
            // Listings can be long: reply header + the whole text in one datagram.
            std::string msg(reinterpret_cast<const char *>(resp.get()), offsetof(proto::Response, raw));
            msg += dev_.listing_;
            sent = send_with_fds(c->sock.get(), msg.data(), msg.size(), nullptr, 0);
        } else {
            sent = send_with_fds(c->sock.get(), resp.get(), sizeof(*resp), out.data(), int(out.size()));
        }
        if (sent) {
            drop_client(id);
            return;
        }
        c = dev_.client(id);
        if (!c) return;
    }
}

int Server::run() {
    epoll_event evs[64];
    for (;;) {
        if (dev_.stop_requested) break;
        int timeout = -1;  // sleep until something happens
        if (uint64_t t = dev_.completer().next_timer_ns()) {
            uint64_t now = now_ns();
            timeout = t <= now ? 0 : int(std::min<uint64_t>((t - now + 999999) / 1000000, 1000));
        }
        // About to sleep: from now on posts ring the doorbell again; what was posted while we were awake
        // (without a doorbell) is picked up by the rescan.
        if (timeout != 0 && dev_.doorbells().going_to_sleep()) timeout = 0;
        int n = ::epoll_wait(epoll_.get(), evs, 64, timeout);
        dev_.doorbells().awake();
        if (n < 0 && errno != EINTR) return 1;
        for (int i = 0; i < n; ++i) {
            uint32_t kind = uint32_t(evs[i].data.u64 >> 32), id = uint32_t(evs[i].data.u64);
            switch (kind) {
                case kListen:
                    accept_clients();
                    break;
                case kSignal: {
                    signalfd_siginfo si;
                    (void)!::read(signals_.get(), &si, sizeof(si));
                    dev_.stop_requested = true;
                    break;
                }
                case kClientSock:
                    if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_client_readable(id);
                    break;
                case kNet:
                    if (net_) net_->on_event(id, evs[i].events);
                    break;
                case kDoorbell:
                    if (Client *c = dev_.client(id)) dev_.doorbells().ring(*c);
                    break;
            }
        }
        dev_.completer().on_timers(now_ns());
    }
    for (auto id : dev_.client_ids()) drop_client(id);
    return 0;
}

}  // namespace simhca
