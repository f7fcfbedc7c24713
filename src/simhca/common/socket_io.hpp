// SPDX-License-Identifier: BSD-3-Clause
// Helpers shared by daemon, library and ctl: the socket name and sending
// datagrams with file descriptors attached.
#pragma once
#include <cstddef>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>

namespace simhca {

// "@simhca" or "@simhca.<SIMHCA_INSTANCE>" as a sockaddr (abstract name).
socklen_t daemon_address(sockaddr_un &addr);
std::string daemon_address_text();

// Send one datagram with up to `nfds` fds. Returns 0 or an errno.
int send_with_fds(int sock, const void *buf, size_t len, const int *fds, int nfds);
// Receive one datagram; received fds land in `fds` (unused slots = -1).
// Returns the byte count, or -errno; 0 means the peer closed.
long recv_with_fds(int sock, void *buf, size_t len, int *fds, int maxfds);

} // namespace simhca
