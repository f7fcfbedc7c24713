// SPDX-License-Identifier: BSD-3-Clause
// Eager RDMA, the BTL's side: the manager sized from the MCA parameters, and its sink (control messages in
// eager fragments, messages to ob1's callbacks, errors and log lines).
#include "btl_xrc_eager.h"

#include "btl_xrc_job.h"

#include "src/core/port_transport.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

xrc::Peer *mca_btl_xrc_eager_sink_t::peer_of(uint32_t rank) noexcept {
    mca_btl_base_endpoint_t *endpoint = mca_btl_xrc_endpoint_for(module, rank);
    return endpoint != nullptr ? &endpoint->peer : nullptr;
}

// One control message over the SRQ path, in an eager fragment that goes back to its list when sent.
bool mca_btl_xrc_eager_sink_t::send_control(xrc::Peer &to, const xrc::EagerControl &message) noexcept {
    // Finalizing: no handshake any more. A request or an answer would only serve traffic that will not come, and
    // toward a node whose connection was evicted it would make a connection to ranks that may be leaving too: they
    // refuse it, and the refusal would count as work not delivered (the exit status).
    if (module->finalizing) return false;
    mca_btl_xrc_frag_t *frag = mca_btl_xrc_frag_get(&module->eager_frags);
    if (frag == nullptr) return false;
    frag->module = module;
    frag->endpoint = mca_btl_xrc_endpoint_of(&to);
    frag->base.des_flags = MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;
    frag->base.des_cbfunc = nullptr;
    std::memcpy(frag->segment.seg_addr.pval, &message, sizeof(message));
    to.prepare_control(frag->op, frag->segment.seg_addr.pval, sizeof(message), frag->lkey);
    frag->op.on_complete = mca_btl_xrc_frag_return_on_complete;
    if (to.queue->post_or_queue(frag->op) != 0) {
        mca_btl_xrc_frag_return(frag);
        return false;
    }
    return true;
}

void mca_btl_xrc_eager_sink_t::drop(uint8_t tag) noexcept {
    BTL_XRC_VERBOSE(1, "btl:xrc: dropped an eager RDMA message (tag %u): no handler", tag);
}

// The ring's bytes cannot be trusted, so neither can the ones before: the job ends.
void mca_btl_xrc_eager_sink_t::ring_failed(mca_btl_xrc_module_t *module,
                                           const xrc::EagerRingFailure &failure) noexcept {
    char what[256];
    snprintf(what, sizeof(what),
             "an eager RDMA message's footer failed its check (tag %u, at position %llu of the ring this process "
             "granted): the ring's data cannot be trusted",
             failure.tag, static_cast<unsigned long long>(failure.position));
    mca_btl_xrc_report_error(module, mca_btl_xrc_endpoint_of(failure.writer), what);
}

void mca_btl_xrc_eager_sink_t::note(const xrc::EagerEvent &e) noexcept {
    try {
        const xrc::EagerNoteLine line = xrc::describe(e);
        BTL_XRC_VERBOSE(line.verbosity, "btl:xrc: %s", line.text.c_str());
    } catch (...) {  // out of memory for a log line: only the line is lost
    }
}

// Off (btl_xrc_use_eager_rdma 0, btl_xrc_max_eager_rdma 0, or the block could not be registered), the manager
// still answers every request with a refusal, so the asker stops waiting.
int mca_btl_xrc_eager_init(mca_btl_xrc_module_t *m) noexcept {
    const xrc::EagerConfig config =
        xrc::eager_config(mca_btl_xrc_component.params, m->super.btl_eager_limit, mca_btl_xrc_component.job->my_rank,
                          m->transport->max_inline() >= sizeof(uint64_t));
    if (!m->eager.init(config, m->counters)) return OPAL_ERR_OUT_OF_RESOURCE;
    if (!m->eager.enabled()) return OPAL_SUCCESS;
    m->ring_receives.reset(new (std::nothrow) mca_btl_xrc_ring_receive_t[config.max_peers]);
    if (m->ring_receives == nullptr) {
        m->eager.off();
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    for (uint32_t i = 0; i < config.max_peers; ++i) mca_btl_xrc_ring_receive_init(m->ring_receives[i]);
    if (const xrc::Result<void> registered = m->eager.register_on(m->transport->pd()); !registered) {
        // Not fatal: every message takes the SRQ path.
        BTL_XRC_VERBOSE(1, "btl:xrc: cannot register %zu bytes for eager RDMA (%s); not using it",
                        m->eager.block_bytes(), strerror(registered.error().errnum()));
        m->eager.off();
    }
    return OPAL_SUCCESS;
}

void mca_btl_xrc_eager_fini(mca_btl_xrc_module_t *m) noexcept {
    m->eager.off();  // deregisters the block before the transport (its PD) goes
}

void mca_btl_xrc_eager_endpoint_added(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint) noexcept {
    mca_btl_xrc_eager_sink_t sink{m};
    m->eager.peer_added(endpoint->peer, sink);
}

void mca_btl_xrc_eager_endpoint_fini(mca_btl_base_endpoint_t *endpoint) noexcept {
    endpoint->module->eager.peer_removed(endpoint->peer);
}

void mca_btl_xrc_eager_request(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint) noexcept {
    mca_btl_xrc_eager_sink_t sink{m};
    m->eager.request(endpoint->peer, sink);
}

void mca_btl_xrc_eager_control(mca_btl_xrc_module_t *m, const void *data, size_t length) noexcept {
    mca_btl_xrc_eager_sink_t sink{m};
    m->eager.on_control(data, length, sink);
}
