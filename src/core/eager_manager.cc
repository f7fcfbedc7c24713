// SPDX-License-Identifier: BSD-3-Clause
#include "eager_manager.h"

#include <new>

namespace xrc {

Result<void> EagerManager::init(const EagerConfig &config, Counters &counters) noexcept {
    off();
    counters_ = &counters;
    my_rank_ = config.my_rank;
    if (config.max_peers == 0) return {};
    try {
        rings_ = std::make_unique<GrantedRing[]>(config.max_peers);
    } catch (const std::bad_alloc &) {
        return Error::out_of_memory("cannot allocate the eager RDMA rings' state");
    }
    if (!credit_words_.init(config.max_peers)) {
        off();
        return Error::out_of_memory("cannot allocate the eager RDMA credit words' state");
    }
    const std::size_t ring_bytes = std::size_t(config.max_peers) * config.slots * config.slot_size;
    const std::size_t words_bytes = std::size_t(config.max_peers) * kWordStride * sizeof(std::uint64_t);
    // Zeroed: a zero sequence number never matches, so every ring starts empty.
    if (Result<void> allocated = block_.allocate(ring_bytes + 2 * words_bytes); !allocated) {
        off();
        return allocated;
    }
    credit_words_base_ = reinterpret_cast<std::uint64_t *>(block_.data() + ring_bytes);
    auto *report_words = reinterpret_cast<std::uint64_t *>(block_.data() + ring_bytes + words_bytes);
    for (std::uint32_t i = 0; i < config.max_peers; ++i) rings_[i].report_word = report_words + i * kWordStride;
    max_peers_ = config.max_peers;
    slots_ = config.slots;
    slot_size_ = config.slot_size;
    threshold_ = config.threshold;
    inline_reports_ = config.inline_reports;
    return {};
}

Result<void> EagerManager::register_on(ibv_pd *pd) noexcept {
    Result<void> registered = block_.register_on(pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, *counters_);
    if (!registered) return registered;
    lkey_ = block_.lkey();
    rkey_ = block_.rkey();
    return {};
}

void EagerManager::off() noexcept {
    early_requests_.clear();
    rings_used_ = 0;
    threshold_ = 0;
    max_peers_ = slots_ = slot_size_ = 0;
    credit_words_base_ = nullptr;
    lkey_ = rkey_ = 0;
    block_.reset();
    credit_words_.clear();
    rings_.reset();
}

void EagerManager::peer_removed(Peer &peer) noexcept {
    for (std::uint32_t i = 0; i < rings_used_; ++i)
        if (rings_[i].writer == &peer) rings_[i].writer = nullptr;
    peer.granted = nullptr;
}

EagerControl EagerManager::control_of(EagerControlType type) const noexcept {
    EagerControl c{};
    c.magic_version = kEagerControlMagic;
    c.type = type;
    c.rank = my_rank_;
    return c;
}

bool EagerManager::take_ring(Peer &peer, const EagerControl &request, EagerControl &grant, EagerNote &note) noexcept {
    if (!enabled()) {
        note = EagerNote::refused_off;
        return false;
    }
    if (rings_used_ == max_peers_) {
        note = EagerNote::refused_all_given;
        return false;
    }
    GrantedRing &r = rings_[rings_used_];
    unsigned char *base = block_.data() + std::size_t(rings_used_) * slots_ * slot_size_;
    r.ring.init(base, slots_, slot_size_);
    r.queue = peer.queue;
    r.remote_srqn = peer.srqs.front().srq_num;
    r.credit_addr = request.addr;
    r.credit_rkey = request.rkey;
    r.writer = &peer;
    r.busy = false;
    grant = control_of(EagerControlType::Grant);
    grant.addr = reinterpret_cast<std::uintptr_t>(base);
    grant.rkey = rkey_;
    grant.slots = slots_;
    grant.slot_size = slot_size_;
    return true;
}

bool EagerManager::on_grant(Peer *peer, const EagerControl &grant) noexcept {
    if (peer == nullptr || peer->eager_state != EagerState::requested) return false;
    peer->eager.activate(grant.addr, grant.rkey, grant.slots, grant.slot_size, credit_word(peer->eager_word));
    peer->eager_state = EagerState::active;
    ++counters_->eager_rings_used;
    return true;
}

bool EagerManager::on_refuse(Peer *peer) noexcept {
    if (peer == nullptr) return false;
    if (peer->ring_paused()) {
        // Our ring there does not stand where our writes stopped: it is never written again. Its credit word stays
        // taken (the reader may still report into it). Counted by the reader (eager_ring_resumes_refused).
        peer->stop_ring();
        return true;
    }
    if (peer->eager_state != EagerState::requested) return false;
    peer->eager_state = EagerState::off;
    credit_words_.give_back(peer->eager_word);  // nobody reports into it
    ++counters_->eager_ring_refusals;
    return true;
}

// A late answer to an earlier ask, after the connection timed out again (paused), agrees as well: the reader stood
// where our writes stopped, and we have written nothing into the ring since.
bool EagerManager::on_resumed(Peer *peer) noexcept {
    if (peer == nullptr || !peer->ring_paused()) return false;
    peer->resume_ring();
    ++counters_->eager_rings_resumed;
    return true;
}

EagerManager::GrantedRing *EagerManager::ring_of(const Peer &writer) const noexcept {
    for (std::uint32_t i = 0; i < rings_used_; ++i)
        if (rings_[i].writer == &writer) return &rings_[i];
    return nullptr;
}

bool EagerManager::skip_copy(const Peer &writer, std::uint32_t seq, std::uint32_t length) noexcept {
    GrantedRing *r = ring_of(writer);
    if (r == nullptr || r->busy || r->ring.broken() || static_cast<std::uint32_t>(r->ring.messages()) != seq ||
        length > eager_max_payload(slot_size_))
        return false;
    r->ring.skip(length);
    ++counters_->eager_ring_skips;
    return true;
}

void EagerManager::report(GrantedRing &r) noexcept {
    const std::uint64_t consumed = r.ring.consumed();
    *r.report_word = consumed;
    SendOp op;
    op.sge = ibv_sge{reinterpret_cast<std::uintptr_t>(r.report_word), sizeof(std::uint64_t), lkey_};
    op.wr.sg_list = &op.sge;
    op.wr.num_sge = 1;
    op.wr.opcode = IBV_WR_RDMA_WRITE;
    op.wr.send_flags = inline_reports_ ? IBV_SEND_INLINE : 0;
    op.wr.wr.rdma.remote_addr = r.credit_addr;
    op.wr.wr.rdma.rkey = r.credit_rkey;
    op.wr.qp_type.xrc.remote_srqn = r.remote_srqn;
    if (r.queue->try_post(op) == 0) {
        r.ring.reported(consumed);
        ++counters_->credit_writes;
    }
}

EagerNoteLine describe(const EagerEvent &e) {
    const std::string rank = "rank " + std::to_string(e.rank);
    const std::string geometry = std::to_string(e.slots) + " x " + std::to_string(e.slot_size) + " bytes";
    switch (e.what) {
        case EagerNote::granted:
            return {10, "eager RDMA ring " + std::to_string(e.index) + " (" + geometry + ") granted to " + rank};
        case EagerNote::refused_off:
            return {10, "refused an eager RDMA ring to " + rank + " (eager RDMA is off here)"};
        case EagerNote::refused_all_given:
            return {10, "refused an eager RDMA ring to " + rank + " (all given, btl_xrc_max_eager_rdma)"};
        case EagerNote::asked_early:
            return {10, rank + " asked for an eager RDMA ring before it was added here; answering then"};
        case EagerNote::using_ring:
            return {10, "writing into " + rank + "'s eager RDMA ring (" + geometry + ")"};
        case EagerNote::refused_by:
            return {10, rank + " has no eager RDMA ring for us; its messages stay on the SRQs"};
        case EagerNote::resumed_by:
            return {10, "writing into " + rank + "'s eager RDMA ring again after our connection timed out or broke"};
        case EagerNote::resume_refused:
            return {1, rank +
                           " asked to write into our eager RDMA ring again where the ring does not stand; its "
                           "messages stay on the SRQs"};
        case EagerNote::malformed_control:
            return {1, "dropped a malformed " + std::to_string(e.bytes) + "-byte control message"};
    }
    return {10, "eager RDMA: " + rank};
}

}  // namespace xrc
