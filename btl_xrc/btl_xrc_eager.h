// SPDX-License-Identifier: BSD-3-Clause
// Eager RDMA in the BTL: the protocol (rings, credit words, the set-up handshake, credit reports) is the module's
// xrc::EagerManager (src/core/eager_manager.h). This side sizes it from the MCA parameters, sends its control
// messages in eager fragments, hands the messages it polls to ob1's tag callbacks, reports a broken ring as an
// error and logs the handshake. The send paths in btl_xrc_module.cc write into a peer's ring when it granted one
// and a slot is free; progress polls the rings before the completion queue.
#pragma once

#include "btl_xrc.h"
#include "btl_xrc_endpoint.h"
#include "btl_xrc_frag.h"

#include "src/core/eager_manager.h"

// What the manager reaches beyond the core through (its sink; see src/core/eager_manager.h).
struct mca_btl_xrc_eager_sink_t {
    mca_btl_xrc_module_t *module;

    xrc::Peer *peer_of(uint32_t rank) noexcept;
    bool send_control(xrc::Peer &to, const xrc::EagerControl &message) noexcept;
    [[gnu::always_inline]] void deliver(uint32_t ring, xrc::Peer *from, uint8_t tag, unsigned char *data,
                                        uint32_t length) noexcept {
        const mca_btl_active_message_callback_t *reg = &module->receive_callbacks[tag];
        if (OPAL_UNLIKELY(reg->cbfunc == nullptr)) {
            drop(tag);
            return;
        }
        module->counters.bytes_received += length;
        mca_btl_xrc_call_ring_receive_cb(&module->super, reg, mca_btl_xrc_endpoint_of(from), tag,
                                         module->ring_receives[ring], data, length);
    }
    void ring_failed(const xrc::EagerRingFailure &failure) noexcept { ring_failed(module, failure); }
    void note(const xrc::EagerEvent &event) noexcept;

private:
    // Static (given the module, not the sink): the sink's address never escapes, so polling keeps it in a register.
    [[gnu::cold]] static void drop(uint8_t tag) noexcept;
    [[gnu::cold]] static void ring_failed(mca_btl_xrc_module_t *module, const xrc::EagerRingFailure &failure) noexcept;
};

int mca_btl_xrc_eager_init(mca_btl_xrc_module_t *module) noexcept;
void mca_btl_xrc_eager_fini(mca_btl_xrc_module_t *module) noexcept;
// The endpoint is in module->endpoints now: it starts counting (or is off when eager RDMA is), and the ring
// request its peer sent before, if any, is answered.
void mca_btl_xrc_eager_endpoint_added(mca_btl_xrc_module_t *module, mca_btl_base_endpoint_t *endpoint) noexcept;
// The endpoint goes away (del_procs): its ring, if it had one, stays polled but no longer names it.
void mca_btl_xrc_eager_endpoint_fini(mca_btl_base_endpoint_t *endpoint) noexcept;
// Asks the peer for a ring (the threshold was reached).
void mca_btl_xrc_eager_request(mca_btl_xrc_module_t *module, mca_btl_base_endpoint_t *endpoint) noexcept;
// A control message arrived through the SRQ path.
void mca_btl_xrc_eager_control(mca_btl_xrc_module_t *module, const void *data, size_t length) noexcept;
// Polls the granted rings: dispatches what arrived, sends credit reports. Returns messages handled. Inline in
// progress: it runs on every call.
[[gnu::always_inline]] inline int mca_btl_xrc_eager_progress(mca_btl_xrc_module_t *module) noexcept {
    mca_btl_xrc_eager_sink_t sink{module};
    const int handled = module->eager.poll(sink);
    module->counters.ring_receives += uint64_t(handled);
    return handled;
}

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
    if (OPAL_UNLIKELY(endpoint->peer.count_srq_send(module->eager.threshold())))
        mca_btl_xrc_eager_request(module, endpoint);
}
