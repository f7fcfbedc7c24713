// SPDX-License-Identifier: BSD-3-Clause
// Eager RDMA: the module's block of rings and credit words, the set-up handshake (Request -> Grant or Refuse,
// over the SRQ path with the BTL's control immediate value), polling the rings and reporting credits.
#include "btl_xrc_eager.h"

#include "btl_xrc_frag.h"
#include "btl_xrc_job.h"

#include "src/core/port_transport.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace {

constexpr size_t kWordStride = 8;  // one credit or report word per 64-byte line

mca_btl_base_endpoint_t *endpoint_of_rank(mca_btl_xrc_module_t *m, uint32_t rank) {
    auto it = m->endpoints->find(rank);
    return it != m->endpoints->end() ? it->second : nullptr;
}

// Sends one control message to the peer over the SRQ path. False if it could not be posted or queued.
bool send_control(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint, const xrc::EagerControl &control) {
    mca_btl_xrc_frag_t *frag = mca_btl_xrc_frag_get(&m->eager_frags);
    if (frag == nullptr) return false;
    frag->module = m;
    frag->endpoint = endpoint;
    frag->base.des_flags = MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;
    frag->base.des_cbfunc = nullptr;
    std::memcpy(frag->segment.seg_addr.pval, &control, sizeof(control));
    endpoint->peer.prepare_srq(frag->op, frag->segment.seg_addr.pval, sizeof(control), frag->lkey,
                               xrc::kImmMarker | xrc::kImmControl);
    frag->op.on_complete = mca_btl_xrc_frag_return_on_complete;
    if (endpoint->peer.queue->post_or_queue(frag->op) != 0) {
        mca_btl_xrc_frag_return(frag);
        return false;
    }
    return true;
}

xrc::EagerControl control_of(xrc::EagerControlType type) {
    xrc::EagerControl c{};
    c.magic_version = xrc::kEagerControlMagic;
    c.type = type;
    c.rank = mca_btl_xrc_component.job->my_rank;
    return c;
}

// A peer asks for a ring: grant the next free one, or refuse (none left, or eager RDMA is off here:
// btl_xrc_use_eager_rdma 0 for this process, or its block could not be registered), so the asker stops waiting
// and frees its credit word.
void answer_request(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint, const xrc::EagerControl &request) {
    xrc::SendQueue *queue = endpoint->peer.queue;
    const char *refusal = m->eager == nullptr                          ? "eager RDMA is off here"
                          : m->eager->rings_used == m->eager->max_peers ? "all given, btl_xrc_max_eager_rdma"
                                                                       : nullptr;
    if (refusal != nullptr) {
        BTL_XRC_VERBOSE(10, "btl:xrc: refused an eager RDMA ring to rank %u (%s)", request.rank, refusal);
        if (send_control(m, endpoint, control_of(xrc::EagerControlType::Refuse))) ++m->counters.eager_rings_refused;
        return;
    }
    mca_btl_xrc_eager_t &e = *m->eager;
    const uint32_t index = e.rings_used;
    mca_btl_xrc_eager_ring_t &r = e.rings[index];
    unsigned char *base = e.block.data() + size_t(index) * e.slots * e.slot_size;
    r.ring.init(base, e.slots, e.slot_size);
    r.queue = queue;
    r.remote_srqn = endpoint->peer.srqs.front().srq_num;
    r.credit_addr = request.addr;
    r.credit_rkey = request.rkey;
    r.writer = endpoint;
    r.busy = false;
    xrc::EagerControl grant = control_of(xrc::EagerControlType::Grant);
    grant.addr = reinterpret_cast<uintptr_t>(base);
    grant.rkey = e.block.rkey();
    grant.slots = e.slots;
    grant.slot_size = e.slot_size;
    if (!send_control(m, endpoint, grant)) return;
    endpoint->eager_ring = &r;
    endpoint->peer.granted = &r.ring;
    ++e.rings_used;  // polled from now on
    ++m->counters.eager_rings_granted;
    BTL_XRC_VERBOSE(10, "btl:xrc: eager RDMA ring %u (%u x %u bytes) granted to rank %u", index, e.slots,
                    e.slot_size, request.rank);
}

// The peer may ask before this process has added it (Open MPI adds a peer when it first sends to it): then the
// request waits for the endpoint (mca_btl_xrc_eager_endpoint_init), so the asker always gets its answer.
void on_request(mca_btl_xrc_module_t *m, const xrc::EagerControl &request) {
    if (mca_btl_base_endpoint_t *endpoint = endpoint_of_rank(m, request.rank); endpoint != nullptr) {
        answer_request(m, endpoint, request);
        return;
    }
    for (const auto &early : m->early_requests)
        if (early.rank == request.rank) return;  // a peer asks once per endpoint: a duplicate is malformed
    BTL_XRC_VERBOSE(10, "btl:xrc: rank %u asked for an eager RDMA ring before it was added here; answering then",
                    request.rank);
    try {
        m->early_requests.push_back(request);
    } catch (...) {  // out of memory: the asker keeps using the SRQs toward us
    }
}

void on_grant(mca_btl_xrc_module_t *m, const xrc::EagerControl &grant) {
    mca_btl_base_endpoint_t *endpoint = endpoint_of_rank(m, grant.rank);
    if (endpoint == nullptr || endpoint->peer.eager_state != xrc::EagerState::requested) return;
    const uint64_t *word = m->eager->credit_words + size_t(endpoint->peer.eager_word) * kWordStride;
    endpoint->peer.eager.activate(grant.addr, grant.rkey, grant.slots, grant.slot_size, word);
    endpoint->peer.eager_state = xrc::EagerState::active;
    ++m->counters.eager_rings_used;
    BTL_XRC_VERBOSE(10, "btl:xrc: writing into rank %u's eager RDMA ring (%u x %u bytes)", grant.rank, grant.slots,
                    grant.slot_size);
}

void on_refuse(mca_btl_xrc_module_t *m, const xrc::EagerControl &refuse) {
    mca_btl_base_endpoint_t *endpoint = endpoint_of_rank(m, refuse.rank);
    if (endpoint == nullptr || endpoint->peer.eager_state != xrc::EagerState::requested) return;
    endpoint->peer.eager_state = xrc::EagerState::off;
    m->eager->free_words[m->eager->free_count++] = endpoint->peer.eager_word;  // nobody reports into it
    ++m->counters.eager_ring_refusals;
    BTL_XRC_VERBOSE(10, "btl:xrc: rank %u has no eager RDMA ring for us; its messages stay on the SRQs", refuse.rank);
}

// Tells the writer how many messages we consumed (an RDMA WRITE into its credit word). Retried at the next poll
// when the send queue has no room.
void report(mca_btl_xrc_module_t *m, mca_btl_xrc_eager_ring_t &r) {
    const uint64_t consumed = r.ring.consumed();
    *r.report_word = consumed;
    xrc::SendOp op;
    op.sge = ibv_sge{reinterpret_cast<uintptr_t>(r.report_word), sizeof(uint64_t), m->eager->block.lkey()};
    op.wr.sg_list = &op.sge;
    op.wr.num_sge = 1;
    op.wr.opcode = IBV_WR_RDMA_WRITE;
    op.wr.send_flags = m->transport->max_inline() >= sizeof(uint64_t) ? IBV_SEND_INLINE : 0;
    op.wr.wr.rdma.remote_addr = r.credit_addr;
    op.wr.wr.rdma.rkey = r.credit_rkey;
    op.wr.qp_type.xrc.remote_srqn = r.remote_srqn;
    if (r.queue->try_post(op) == 0) {
        r.ring.reported(consumed);
        ++m->counters.credit_writes;
    }
}

}  // namespace

int mca_btl_xrc_eager_init(mca_btl_xrc_module_t *m) noexcept {
    const auto &P = mca_btl_xrc_component.params;
    m->eager.reset();
    if (!P.use_eager_rdma || P.max_eager_rdma == 0) return OPAL_SUCCESS;
    std::unique_ptr<mca_btl_xrc_eager_t> e;
    try {
        e = std::make_unique<mca_btl_xrc_eager_t>();
        e->max_peers = static_cast<uint32_t>(P.max_eager_rdma);
        e->rings = std::make_unique<mca_btl_xrc_eager_ring_t[]>(e->max_peers);
        e->free_words = std::make_unique<uint32_t[]>(e->max_peers);
    } catch (...) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    e->slots = static_cast<uint32_t>(P.eager_rdma_num);
    // Automatic: the largest eager message fits (openib sizes its slots so too), so everything ob1 sends eagerly
    // can take the ring; small messages take only the 64-byte granules they need.
    e->slot_size = P.eager_rdma_slot_size != 0
                       ? static_cast<uint32_t>(P.eager_rdma_slot_size)
                       : std::min<uint32_t>(xrc::eager_span(static_cast<uint32_t>(m->super.btl_eager_limit)),
                                            xrc::kEagerMaxSlotSize);
    e->threshold = static_cast<uint32_t>(P.eager_rdma_threshold);
    const size_t ring_bytes = size_t(e->max_peers) * e->slots * e->slot_size;
    const size_t words_bytes = size_t(e->max_peers) * kWordStride * sizeof(uint64_t);
    // Zeroed: a zero sequence number never matches, so every ring starts empty.
    if (!e->block.allocate(ring_bytes + 2 * words_bytes)) return OPAL_ERR_OUT_OF_RESOURCE;
    e->credit_words = reinterpret_cast<uint64_t *>(e->block.data() + ring_bytes);
    auto *report_words = reinterpret_cast<uint64_t *>(e->block.data() + ring_bytes + words_bytes);
    for (uint32_t i = 0; i < e->max_peers; ++i) {
        e->rings[i].report_word = report_words + size_t(i) * kWordStride;
        e->free_words[i] = e->max_peers - 1 - i;
    }
    e->free_count = e->max_peers;
    if (!e->block.register_on(m->transport->pd(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, m->counters)) {
        // Not fatal: every message takes the SRQ path.
        BTL_XRC_VERBOSE(1, "btl:xrc: cannot register %zu bytes for eager RDMA (%s); not using it", e->block.size(),
                        strerror(errno));
        return OPAL_SUCCESS;
    }
    m->eager = std::move(e);
    return OPAL_SUCCESS;
}

void mca_btl_xrc_eager_fini(mca_btl_xrc_module_t *m) noexcept {
    m->early_requests.clear();
    m->eager.reset();  // deregisters the block before the transport (its PD) goes
}

void mca_btl_xrc_eager_endpoint_init(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint) noexcept {
    endpoint->peer.eager_state = m->eager != nullptr ? xrc::EagerState::counting : xrc::EagerState::off;
    endpoint->peer.eager_sends = 0;
}

void mca_btl_xrc_eager_endpoint_added(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint) noexcept {
    auto &early = m->early_requests;
    for (auto it = early.begin(); it != early.end(); ++it) {
        if (it->rank != endpoint->peer.rank) continue;
        const xrc::EagerControl request = *it;
        early.erase(it);
        answer_request(m, endpoint, request);
        return;
    }
}

void mca_btl_xrc_eager_endpoint_fini(mca_btl_base_endpoint_t *endpoint) noexcept {
    if (endpoint->eager_ring != nullptr) endpoint->eager_ring->writer = nullptr;
    endpoint->eager_ring = nullptr;
    endpoint->peer.granted = nullptr;
}

void mca_btl_xrc_eager_request(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint) noexcept {
    mca_btl_xrc_eager_t &e = *m->eager;
    if (e.free_count == 0) {  // every credit word is in use: this peer stays on the SRQ path
        endpoint->peer.eager_state = xrc::EagerState::off;
        return;
    }
    const uint32_t word = e.free_words[--e.free_count];
    xrc::EagerControl request = control_of(xrc::EagerControlType::Request);
    request.addr = reinterpret_cast<uintptr_t>(e.credit_words + size_t(word) * kWordStride);
    request.rkey = e.block.rkey();
    endpoint->peer.eager_word = word;
    endpoint->peer.eager_state = xrc::EagerState::requested;
    if (!send_control(m, endpoint, request)) {
        e.free_words[e.free_count++] = word;
        endpoint->peer.eager_state = xrc::EagerState::off;
        return;
    }
    ++m->counters.eager_ring_requests;
}

void mca_btl_xrc_eager_control(mca_btl_xrc_module_t *m, const void *data, size_t length) noexcept {
    xrc::EagerControl control;
    if (!xrc::decode_eager_control(data, length, control)) {
        BTL_XRC_VERBOSE(1, "btl:xrc: dropped a malformed %zu-byte control message", length);
        return;
    }
    if (m->eager == nullptr && control.type != xrc::EagerControlType::Request) return;  // we never asked
    switch (control.type) {
    case xrc::EagerControlType::Request:
        on_request(m, control);
        break;
    case xrc::EagerControlType::Grant:
        on_grant(m, control);
        break;
    case xrc::EagerControlType::Refuse:
        on_refuse(m, control);
        break;
    }
}

int mca_btl_xrc_eager_progress(mca_btl_xrc_module_t *m) noexcept {
    mca_btl_xrc_eager_t *e = m->eager.get();
    if (e == nullptr) return 0;
    int handled = 0;
    for (uint32_t i = 0; i < e->rings_used; ++i) {
        mca_btl_xrc_eager_ring_t &r = e->rings[i];
        if (r.busy) continue;
        xrc::EagerRing::Message message;
        while (r.ring.peek(message)) {
            const mca_btl_active_message_callback_t *reg = &m->receive_callbacks[message.tag];
            if (message.well_formed && r.writer != nullptr) r.writer->peer.eager.note_ack(message.ack);
            if (message.well_formed && reg->cbfunc != nullptr) {
                r.busy = true;
                m->counters.bytes_received += message.length;
                mca_btl_xrc_deliver(m, reg, message.tag, const_cast<unsigned char *>(message.data), message.length,
                                    r.writer);
                r.busy = false;
            } else {
                BTL_XRC_VERBOSE(1, "btl:xrc: dropped an eager RDMA message (tag %u)%s", message.tag,
                                message.well_formed ? ": no handler" : " with a malformed footer: ring no longer polled");
            }
            r.ring.release(message);
            ++handled;
        }
        if (r.ring.report_due()) report(m, r);
    }
    m->counters.ring_receives += uint64_t(handled);
    return handled;
}
