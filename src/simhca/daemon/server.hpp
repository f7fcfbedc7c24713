// SPDX-License-Identifier: BSD-3-Clause
// The daemon's event loop: accepts library connections on the abstract
// socket, dispatches control requests, wakes the data path on doorbells and
// timers, and sleeps in epoll_wait when there is nothing to do.
#pragma once
#include <string>

#include <memory>
#include <vector>

#include "../common/unique_fd.hpp"
#include "device.hpp"
#include "fabric.hpp"
#include "network.hpp"

namespace simhca {

class Server {
public:
    explicit Server(Device &dev) : dev_(dev) {}
    // Returns 0 on success or an errno (EADDRINUSE: another daemon).
    // With fabric nodes, also listens for the other daemons (TCP).
    int listen(const std::vector<FabricNode> &nodes);
    // Runs until SIGTERM/SIGINT or a "stop" fault; returns the exit status.
    int run();

private:
    void accept_clients();
    void on_client_readable(uint32_t id);
    void drop_client(uint32_t id);
    void watch(int fd, uint32_t kind, uint32_t id);

    Device &dev_;
    UniqueFd listen_, epoll_, signals_;
    std::unique_ptr<Network> net_;
};

} // namespace simhca
