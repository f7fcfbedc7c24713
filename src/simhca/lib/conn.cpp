// SPDX-License-Identifier: BSD-3-Clause
// The control connection to simhcad and the shared-memory mapping helper.
#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../common/socket_io.hpp"
#include "lib.hpp"

namespace simhca::lib {

Conn::~Conn() {
    if (fd_ >= 0) ::close(fd_);
}

int Conn::connect() {
    int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) return errno;
    // An autobound (unique, abstract) name for our end: when this socket is passed to another context
    // as its cmd_fd, the daemon recognises it by that name (ibv_import_device). Without it only import
    // is lost, so a failure is not fatal.
    sockaddr_un self{};
    self.sun_family = AF_UNIX;
    (void)::bind(s, reinterpret_cast<sockaddr *>(&self), sizeof(sa_family_t));
    sockaddr_un addr;
    socklen_t len = daemon_address(addr);
    if (::connect(s, reinterpret_cast<sockaddr *>(&addr), len) < 0) {
        int e = errno;
        ::close(s);
        return e;
    }
    fd_ = s;
    pid_ = ::getpid();
    return 0;
}

int Conn::call(proto::Op op, proto::Request &req, proto::Response &resp, int in_fd, int *out_fds,
               int max_out) noexcept {
    std::lock_guard<std::mutex> g(mu_);
    if (fd_ < 0) return ENODEV;
    // After fork() the child shares this socket with its parent and replies
    // could reach the wrong process: the child gets its own connection that
    // joins the parent's context (what sharing the uverbs fd gives).
    if (::getpid() != pid_)
        if (int e = rejoin()) return e;
    req.op = uint32_t(op);
    if (int e = send_with_fds(fd_, &req, sizeof(req), &in_fd, in_fd >= 0 ? 1 : 0)) return e == EPIPE ? ENODEV : e;
    int fds[4];
    long n = recv_with_fds(fd_, &resp, sizeof(resp), fds, 4);
    int kept = 0;
    for (int i = 0; i < 4; ++i) {
        if (fds[i] < 0) continue;
        if (out_fds && kept < max_out) out_fds[kept++] = fds[i];
        else ::close(fds[i]);
    }
    if (n <= 0) return n == 0 ? ENODEV : int(-n); // daemon gone: like a device removal
    if (size_t(n) < offsetof(proto::Response, raw)) return EPROTO;
    return resp.err;
}

int Conn::rejoin() noexcept {
    if (!secret_) return EOPNOTSUPP; // a probe connection: nothing to join
    int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) return errno;
    sockaddr_un addr;
    socklen_t len = daemon_address(addr);
    proto::Request req{};
    proto::Response resp{};
    req.op = uint32_t(proto::Op::Join);
    req.join = {client_id_, 0, secret_};
    int fds[4];
    if (::connect(s, reinterpret_cast<sockaddr *>(&addr), len) < 0 || send_with_fds(s, &req, sizeof(req), nullptr, 0) ||
        recv_with_fds(s, &resp, sizeof(resp), fds, 4) <= 0 || resp.err) {
        int e = resp.err ? resp.err : ENODEV;
        ::close(s);
        return e;
    }
    ::close(fd_); // the child's copy only; the parent keeps its own
    fd_ = s;
    pid_ = ::getpid();
    return 0;
}

int Mapping::map(int fd, size_t len) noexcept {
    size_t page = size_t(::sysconf(_SC_PAGESIZE));
    len = (len + page - 1) / page * page;
    void *p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    ::close(fd);
    if (p == MAP_FAILED) return e;
    base = p;
    size = len;
    return 0;
}

void Mapping::unmap() noexcept {
    if (base) ::munmap(base, size);
    base = nullptr;
}

void ring_doorbell(Context &c) noexcept {
    uint64_t one = 1;
    (void)!::write(c.doorbell, &one, sizeof(one));
}

void ring_doorbell_sq(Context &c) noexcept {
    if (c.daemon_awake) {
        // Store the producer index (done by the caller), then load the word; the daemon stores 0 into
        // it, then loads every producer index (Device::going_to_sleep). One of the two sees the other.
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (c.daemon_awake->load(std::memory_order_relaxed)) return; // it will find the WQEs before sleeping
    }
    ring_doorbell(c);
}

} // namespace simhca::lib
