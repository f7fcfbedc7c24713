// The BTL endpoint: what this module needs to reach one peer process (created by add_procs).
#pragma once

#include "btl_xrc.h"

#include "src/core/port_transport.h"

struct mca_btl_base_endpoint_t {
    opal_proc_t *proc;
    mca_btl_xrc_module_t *module;
    xrc::PeerRoute route;
};

// The send queue toward the endpoint. On-node peers get theirs (through the HCA's loopback) on first use, so a
// job whose on-node traffic goes through vader never creates those QPs.
xrc::SendQueue *mca_btl_xrc_endpoint_loopback(mca_btl_base_endpoint_t *endpoint) noexcept;

inline xrc::SendQueue *mca_btl_xrc_endpoint_queue(mca_btl_base_endpoint_t *endpoint) noexcept {
    xrc::SendQueue *queue = endpoint->route.queue;
    return OPAL_LIKELY(queue != nullptr) ? queue : mca_btl_xrc_endpoint_loopback(endpoint);
}
