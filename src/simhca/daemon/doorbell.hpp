// SPDX-License-Identifier: BSD-3-Clause
// Doorbells: what wakes the requester. A client's doorbell eventfd (edge-triggered, never read back) makes
// the requester pull every send queue of that client. The "daemon awake" word clients read before ringing
// (lib ring_doorbell_sq): while it is 1, a post only writes the ring and the daemon finds it in
// going_to_sleep(), which clears the word and then rescans every send queue (true: it found work, do not
// sleep). Saves the client's eventfd write and the daemon's wakeup whenever a post comes while the daemon
// is busy (ping-pong replies).
#pragma once
#include <atomic>
#include <cstdint>
#include <vector>

#include "../common/unique_fd.hpp"
#include "object_table.hpp"

namespace simhca {

class Completer;
class Requester;

class Doorbells {
public:
    Doorbells(ObjectTable &objs, Requester &req, Completer &comp) : objs_(objs), req_(req), comp_(comp) {}

    void ring(Client &c);                             // c's doorbell (or a Kick request): pull all of its send queues
    int setup_awake_page();                           // 0 or errno (then clients always ring)
    int awake_fd() const { return awake_fd_.get(); }  // -1 when there is no awake word
    void awake() {
        if (awake_) awake_->store(1, std::memory_order_relaxed);
    }
    bool going_to_sleep();

private:
    void pull(uint32_t qpn);

    ObjectTable &objs_;
    Requester &req_;
    Completer &comp_;
    std::vector<uint32_t> qpns_;  // ring's snapshot of the client's QPs (kept: no allocation per doorbell)
    UniqueFd awake_fd_;           // sealed memfd: clients can only map it read-only
    std::atomic<uint32_t> *awake_ = nullptr;
};

}  // namespace simhca
