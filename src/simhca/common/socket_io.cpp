// SPDX-License-Identifier: BSD-3-Clause
#include "socket_io.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <algorithm>

namespace simhca {

socklen_t daemon_address(sockaddr_un &addr) {
    std::string name = daemon_address_text();
    std::memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    // Abstract namespace: leading NUL, name not NUL terminated.
    size_t n = std::min(name.size() - 1, sizeof(addr.sun_path) - 1);
    std::memcpy(addr.sun_path + 1, name.data() + 1, n);
    return socklen_t(offsetof(sockaddr_un, sun_path) + 1 + n);
}

std::string daemon_address_text() {
    std::string name = "@simhca";
    const char *inst = std::getenv("SIMHCA_INSTANCE");
    if (inst && *inst) {
        name += ".";
        name += inst;
    }
    return name;
}

int send_with_fds(int sock, const void *buf, size_t len, const int *fds, int nfds) {
    iovec iov{const_cast<void *>(buf), len};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 4)];
    if (nfds > 0) {
        if (nfds > 4) return EINVAL;
        std::memset(ctl, 0, sizeof(ctl));
        msg.msg_control = ctl;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    for (;;) {
        ssize_t r = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
        if (r >= 0) return 0;
        if (errno != EINTR) return errno;
    }
}

long recv_with_fds(int sock, void *buf, size_t len, int *fds, int maxfds) {
    for (int i = 0; i < maxfds; ++i) fds[i] = -1;
    iovec iov{buf, len};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 4)];
    msg.msg_control = ctl;
    msg.msg_controllen = sizeof(ctl);
    ssize_t r;
    do {
        r = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    } while (r < 0 && errno == EINTR);
    if (r < 0) return -errno;
    int got = 0;
    for (cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int tmp[8];
        n = std::min<size_t>(n, 8);
        std::memcpy(tmp, CMSG_DATA(c), n * sizeof(int));
        for (size_t i = 0; i < n; ++i) {
            if (got < maxfds) fds[got++] = tmp[i];
            else ::close(tmp[i]); // never leak fds we cannot hand back
        }
    }
    if (msg.msg_flags & MSG_TRUNC) return -EMSGSIZE;
    return r;
}

} // namespace simhca
