// SPDX-License-Identifier: BSD-3-Clause
// A TGT QP lives while someone holds it: its creator, and every rank of the node that received through it (a handle
// opened on its first message there). When the creator dies before any of them received anything (a death right
// after MPI_Init, with connections made eagerly), the QP dies with it, and the initiator's sends to the node's other
// ranks reach nothing until the HCA's retry budget ends the job. So, when processes may die and the job go on
// (CmConfig::node_mate_holds), the creator first has one node-mate open a handle of its own (HOLD, answered HELD),
// and only then ACCEPTs, naming that holder, whom the initiator's CLOSE reaches too. One death then never takes the
// QP away from the living; two at once on the same node (creator and holder) still may.
//
// Scale: the holders are spread by initiator over the node's ranks, so each holds about as many handles as it
// creates TGT QPs (O(remote senders / ranks per node)); a handle is a software object, not a QP of the HCA.
#include "connection_manager.h"

#include <algorithm>

namespace xrc {

std::uint32_t ConnectionManager::choose_holder(std::uint32_t sender, std::uint32_t not_this) const noexcept {
    const std::vector<std::uint32_t> &mates = config_.node_mates;
    for (std::size_t i = 0; i < mates.size(); ++i) {
        const std::uint32_t rank = mates[(sender + i) % mates.size()];
        if (rank != config_.my_rank && rank != not_this && usable(rank)) return rank;
    }
    return kCmNoRank;
}

void ConnectionManager::accept(OwnedTgt &t) noexcept {
    const PortAddress *to = host_.address_of(t.sender);
    if (to == nullptr) return;  // its retransmitted CONNECT is answered once its address is here
    send(*to, request_to(CmType::Accept, t.sender, *to, t.generation, t.ini_qpn, t.tgt.get()->qp_num, t.holder));
}

void ConnectionManager::ask_holder(OwnedTgt &t, std::uint64_t now) noexcept {
    const std::string made =
        "rank " + std::to_string(t.sender) + "'s connection (TGT QP " + std::to_string(t.tgt.get()->qp_num) + ")";
    t.holder =
        config_.node_mate_holds && !config_.other_job && !finalizing_ ? choose_holder(t.sender, kCmNoRank) : kCmNoRank;
    if (t.holder == kCmNoRank) {
        accept(t);
        host_.note("accepted " + made);
        return;
    }
    t.accepted = false;
    ++awaiting_held_;
    t.hold_attempts = 0;
    t.next_hold_us = now;
    t.hold_retry_us = config_.first_retry_us;
    t.hold_deadline_us = now + config_.hold_wait_us;
    host_.note("made " + made + ": rank " + std::to_string(t.holder) + " is asked to hold it too");
    resend_holds(now);
    host_.timers_changed();
}

void ConnectionManager::resend_holds(std::uint64_t now) noexcept {
    if (awaiting_held_ == 0) return;
    for (auto &[k, t] : owned_) {
        if (t.accepted) continue;
        if (t.holder != kCmNoRank && !usable(t.holder)) {
            t.holder = choose_holder(t.sender, t.holder);
            t.hold_attempts = 0;
            t.next_hold_us = now;
            t.hold_retry_us = config_.first_retry_us;
        }
        if (t.holder == kCmNoRank || (now >= t.hold_deadline_us && !held_)) {
            if (t.holder != kCmNoRank)
                host_.note("rank " + std::to_string(t.holder) + " did not hold TGT QP " +
                           std::to_string(t.tgt.get()->qp_num) + " within " +
                           std::to_string(config_.hold_wait_us / 1000) + " ms: accepted rank " +
                           std::to_string(t.sender) + "'s connection without a holder");
            t.holder = kCmNoRank;
            t.accepted = true;
            --awaiting_held_;
            accept(t);
            continue;
        }
        if (now < t.next_hold_us) continue;
        t.next_hold_us = now + t.hold_retry_us;
        t.hold_retry_us = std::min(t.hold_retry_us * 2, config_.max_retry_us);
        const PortAddress *to = host_.address_of(t.holder);
        if (to == nullptr) continue;  // not fetched yet: asked again at the next retry
        if (t.hold_attempts++ > 0) ++counters_->cm_retransmissions;
        send(*to, request_to(CmType::Hold, t.holder, *to, t.generation, t.ini_qpn, t.tgt.get()->qp_num, t.sender));
    }
}

void ConnectionManager::on_hold(const CmMessage &m, const PortAddress &from) noexcept {
    // Only a node-mate's TGT QP is ours to hold (it is in this node's XRC domain).
    if (config_.other_job || handle_keeper_ != nullptr || port_identity(from) != config_.my_port) {
        ++counters_->cm_rejected;
        host_.note("dropped a HOLD from rank " + std::to_string(m.src_rank) + ", which is not on this node's port");
        return;
    }
    // Leaving, or the initiator is dead: no new handle (the creator accepts without a holder, or releases it).
    if (finalizing_ || abandoned_ || dead_ranks_.count(m.named_rank) != 0) {
        ++counters_->cm_stale;
        return;
    }
    auto it = opened_.find(m.tgt_qpn);
    if (it != opened_.end() && it->second.ini_qpn != m.ini_qpn) {
        release_opened(it);  // a handle on a QP number that has been reused since
        it = opened_.end();
    }
    if (it == opened_.end()) {
        // A sender has one connection to this node at a time: what we hold of its older ones is stale.
        drop_held_handles(m.named_rank, m.generation);
        const auto handle = host_.open_tgt(m.tgt_qpn, m.ini_qpn);
        if (!handle) {
            host_.note("cannot hold TGT QP " + std::to_string(m.tgt_qpn) + " for rank " + std::to_string(m.src_rank) +
                       ": " + handle.error().message());
            return;
        }
        try {
            it = opened_.emplace(m.tgt_qpn, OpenedTgt{m.ini_qpn, HostQp(&host_, *handle)}).first;
        } catch (...) {  // out of memory: the handle goes (HostQp), the creator accepts without a holder
            return;
        }
        ++counters_->tgt_handles;
        count_connection_opened(*counters_);
    } else {
        ++counters_->cm_duplicates;  // our HELD was lost, or we had received through it already
    }
    it->second.sender = m.named_rank;
    it->second.generation = m.generation;
    CmMessage h = reply_to(m, CmType::Held);
    h.token = from.token;
    h.tgt_qpn = m.tgt_qpn;
    h.named_rank = m.named_rank;
    send(from, h);
}

void ConnectionManager::on_held(const CmMessage &m) noexcept {
    auto it = owned_.find(key(m.named_rank, m.generation));
    if (it == owned_.end() || it->second.ini_qpn != m.ini_qpn || it->second.tgt.get()->qp_num != m.tgt_qpn ||
        it->second.holder != m.src_rank) {
        ++counters_->cm_stale;
        return;
    }
    OwnedTgt &t = it->second;
    if (t.accepted) {
        ++counters_->cm_duplicates;
        return;
    }
    t.accepted = true;
    --awaiting_held_;
    accept(t);
    host_.note("accepted rank " + std::to_string(t.sender) + "'s connection (TGT QP " +
               std::to_string(t.tgt.get()->qp_num) + ", held by rank " + std::to_string(t.holder) + " too)");
}

void ConnectionManager::drop_held_handles(std::uint32_t sender, std::uint32_t generation) noexcept {
    for (auto it = opened_.begin(); it != opened_.end();)
        it = it->second.sender == sender && it->second.generation < generation ? release_opened(it) : std::next(it);
}

}  // namespace xrc
