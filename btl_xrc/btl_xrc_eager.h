// SPDX-License-Identifier: BSD-3-Clause
// Eager RDMA in the BTL (the rings themselves are src/core/eager_rdma.h): one registered block per module holds
// the receive rings this process grants (btl_xrc_max_eager_rdma of them), the credit words its peers report
// into, and the words its own reports are sent from. The send paths in btl_xrc_module.cc write into a peer's
// ring when it granted one and a slot is free; progress polls the rings before the completion queue.
#pragma once

#include "btl_xrc.h"
#include "btl_xrc_endpoint.h"

#include "src/core/eager_rdma.h"
#include "src/core/registered_block.h"
#include "src/core/send_queue.h"

#include <memory>

// The receive side of one granted ring, and where its credit reports go.
struct mca_btl_xrc_eager_ring_t {
    xrc::EagerRing ring;
    xrc::SendQueue *queue;  // toward the writer's node
    uint32_t remote_srqn;   // one of the writer's SRQs: XRC routes an RDMA WRITE by it
    uint64_t credit_addr;   // the writer's credit word
    uint32_t credit_rkey;
    uint64_t *report_word;  // registered source of our reports
    mca_btl_base_endpoint_t *writer;  // the peer writing into it (null once del_procs released it)
    bool busy;              // one of its messages is in a callback: no reentry from a nested progress
};

struct mca_btl_xrc_eager_t {
    xrc::RegisteredBlock block;  // rings, then credit words, then report words
    uint32_t max_peers, slots, slot_size, threshold;
    std::unique_ptr<mca_btl_xrc_eager_ring_t[]> rings;  // max_peers; the first rings_used are granted
    uint32_t rings_used;
    uint64_t *credit_words;                  // in `block`: one per cache line, max_peers of them
    std::unique_ptr<uint32_t[]> free_words;  // stack of unused credit-word indexes
    uint32_t free_count;
};

int mca_btl_xrc_eager_init(mca_btl_xrc_module_t *module) noexcept;
void mca_btl_xrc_eager_fini(mca_btl_xrc_module_t *module) noexcept;
// A new endpoint starts counting, or is off when eager RDMA is.
void mca_btl_xrc_eager_endpoint_init(mca_btl_xrc_module_t *module, mca_btl_base_endpoint_t *endpoint) noexcept;
// The endpoint is in module->endpoints now: answers the ring request its peer sent before, if any.
void mca_btl_xrc_eager_endpoint_added(mca_btl_xrc_module_t *module, mca_btl_base_endpoint_t *endpoint) noexcept;
// The endpoint goes away (del_procs): its ring, if it had one, stays polled but no longer names it.
void mca_btl_xrc_eager_endpoint_fini(mca_btl_base_endpoint_t *endpoint) noexcept;
// Asks the peer for a ring (the threshold was reached).
void mca_btl_xrc_eager_request(mca_btl_xrc_module_t *module, mca_btl_base_endpoint_t *endpoint) noexcept;
// A control message arrived through the SRQ path.
void mca_btl_xrc_eager_control(mca_btl_xrc_module_t *module, const void *data, size_t length) noexcept;
// Polls the granted rings: dispatches what arrived, sends credit reports. Returns messages handled.
int mca_btl_xrc_eager_progress(mca_btl_xrc_module_t *module) noexcept;

// A send of `length` bytes was posted, into the peer's ring or through the SRQs: counts it, and asks the peer for a
// ring once enough SRQ sends went its way.
inline void mca_btl_xrc_sent(mca_btl_xrc_module_t *module, mca_btl_base_endpoint_t *endpoint, bool ring,
                             size_t length) noexcept {
    module->counters.bytes_sent += length;
    if (ring) {
        ++module->counters.ring_sends;
        return;
    }
    ++module->counters.srq_sends;
    if (endpoint->peer.eager_state == xrc::EagerState::active) ++module->counters.srq_sends_ring_active;
    if (OPAL_UNLIKELY(endpoint->peer.count_srq_send(module->eager != nullptr ? module->eager->threshold : 0)))
        mca_btl_xrc_eager_request(module, endpoint);
}
