// The BTL endpoint: what this module needs to reach one peer process (created by add_procs).
#pragma once

#include "btl_xrc.h"

#include "src/core/eager_rdma.h"
#include "src/core/port_transport.h"

enum class mca_btl_xrc_eager_state_t : uint8_t {
    counting,   // counting sends toward btl_xrc_eager_rdma_threshold
    requested,  // asked the peer for a ring
    active,     // writing into the peer's ring
    off,        // refused, or eager RDMA is off
};

struct mca_btl_base_endpoint_t {
    opal_proc_t *proc;
    mca_btl_xrc_module_t *module;
    xrc::PeerRoute route;
    xrc::EagerChannel eager;  // toward the peer's ring, once granted
    mca_btl_xrc_eager_state_t eager_state = mca_btl_xrc_eager_state_t::counting;
    uint32_t eager_sends = 0;    // sends so far while counting
    uint32_t eager_word = 0;     // index of our credit word while requested/active
    // The ring we granted this peer (it writes into it), or null: our messages to the peer carry its consumed
    // count.
    struct mca_btl_xrc_eager_ring_t *eager_ring = nullptr;
};

// The send queue toward the endpoint. On-node peers get theirs (through the HCA's loopback) on first use, so a
// job whose on-node traffic goes through vader never creates those QPs.
xrc::SendQueue *mca_btl_xrc_endpoint_loopback(mca_btl_base_endpoint_t *endpoint) noexcept;

inline xrc::SendQueue *mca_btl_xrc_endpoint_queue(mca_btl_base_endpoint_t *endpoint) noexcept {
    xrc::SendQueue *queue = endpoint->route.queue;
    return OPAL_LIKELY(queue != nullptr) ? queue : mca_btl_xrc_endpoint_loopback(endpoint);
}
