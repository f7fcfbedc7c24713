// SPDX-License-Identifier: BSD-3-Clause
// rsockets (socket API over RDMA): NOT implemented by the software HCA. The entry points exist because
// programs are linked BIND_NOW against all of librdmacm.so.1; they fail cleanly. rsocket() says ENOSYS
// (no rsocket can be created), and every call on an rsocket descriptor then has none to act on: EBADF.
#include <cerrno>
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

namespace {
int no_rsocket() noexcept
{
    errno = EBADF;
    return -1;
}
} // namespace

extern "C" {

int rsocket(int, int, int) { errno = ENOSYS; return -1; }
int rbind(int, const sockaddr *, socklen_t) { return no_rsocket(); }
int rlisten(int, int) { return no_rsocket(); }
int raccept(int, sockaddr *, socklen_t *) { return no_rsocket(); }
int rconnect(int, const sockaddr *, socklen_t) { return no_rsocket(); }
int rshutdown(int, int) { return no_rsocket(); }
int rclose(int) { return no_rsocket(); }
ssize_t rrecv(int, void *, size_t, int) { return no_rsocket(); }
ssize_t rrecvfrom(int, void *, size_t, int, sockaddr *, socklen_t *) { return no_rsocket(); }
ssize_t rrecvmsg(int, msghdr *, int) { return no_rsocket(); }
ssize_t rsend(int, const void *, size_t, int) { return no_rsocket(); }
ssize_t rsendto(int, const void *, size_t, int, const sockaddr *, socklen_t) { return no_rsocket(); }
ssize_t rsendmsg(int, const msghdr *, int) { return no_rsocket(); }
ssize_t rread(int, void *, size_t) { return no_rsocket(); }
ssize_t rreadv(int, const iovec *, int) { return no_rsocket(); }
ssize_t rwrite(int, const void *, size_t) { return no_rsocket(); }
ssize_t rwritev(int, const iovec *, int) { return no_rsocket(); }
int rpoll(pollfd *, nfds_t, int) { return no_rsocket(); }
int rselect(int, fd_set *, fd_set *, fd_set *, timeval *) { return no_rsocket(); }
int rgetpeername(int, sockaddr *, socklen_t *) { return no_rsocket(); }
int rgetsockname(int, sockaddr *, socklen_t *) { return no_rsocket(); }
int rsetsockopt(int, int, int, const void *, socklen_t) { return no_rsocket(); }
int rgetsockopt(int, int, int, void *, socklen_t *) { return no_rsocket(); }
int rfcntl(int, int, ...) { return no_rsocket(); }
off_t riomap(int, void *, size_t, int, int, off_t) { return no_rsocket(); }
int riounmap(int, void *, size_t) { return no_rsocket(); }
size_t riowrite(int, const void *, size_t, off_t, int) { errno = EBADF; return static_cast<size_t>(-1); }

} // extern "C"
