// SPDX-License-Identifier: BSD-3-Clause
// The connection manager's part in a LID change (LID_CHANGE, CLIENT_REREGISTER): announcing this port's new LID
// (ADDRESS, retransmitted until acknowledged) and, hearing of another port's, updating the stored addresses of that
// port and moving the paths of this process's QPs toward it. The protocol is in wire_format.h, who tells whom in
// docs/connections.md.
#include "connection_manager.h"

#include <algorithm>

namespace xrc {
namespace {

// ADDRESS datagrams sent per pass: the UD channel has 64 send slots, and a datagram that finds none is lost (and
// retransmitted later), so a large job's announcement goes out in bursts the channel can take.
constexpr std::size_t kAddressBurst = 32;

}  // namespace

void ConnectionManager::announce_lid(std::uint16_t old_lid, std::uint16_t new_lid) noexcept {
    Guard g(*this);
    if (new_lid == 0 || new_lid == old_lid || new_lid == announced_lid_) return;
    const std::uint16_t previous = announced_lid_ != 0 ? announced_lid_ : old_lid;
    announced_lid_ = new_lid;
    ++announcements_;
    ++counters_->lid_changes;
    // The node's other ranks share the port: their stored addresses move with ours.
    host_.address_moved(config_.my_port, previous, new_lid);
    const std::uint64_t now = host_.now_us();
    std::vector<AddressNotice> notices;
    try {
        // First whoever holds a QP toward this port (a link's owner and peers, the senders of our TGT QPs), then
        // the share of the job this process speaks for, so that connections made later find the port.
        std::vector<std::uint32_t> ranks;
        for (const auto &[port, link] : links_) {
            ranks.push_back(link->owner_);
            for (const Peer *peer : link->peers_) ranks.push_back(peer->rank);
        }
        for (const auto &[k, t] : owned_) ranks.push_back(t.sender);
        for (std::uint32_t r = config_.local_index; config_.local_count > 0 && r < config_.job_size;
             r += config_.local_count)
            ranks.push_back(r);
        std::sort(ranks.begin(), ranks.end());
        ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
        // A rank that has not acknowledged an earlier change still knows the port by the LID before it.
        std::sort(address_notices_.begin(), address_notices_.end(),
                  [](const AddressNotice &a, const AddressNotice &b) { return a.rank < b.rank; });
        auto pending = address_notices_.begin();
        notices.reserve(ranks.size());
        for (std::uint32_t rank : ranks) {
            if (rank == config_.my_rank) continue;
            while (pending != address_notices_.end() && pending->rank < rank) ++pending;
            const bool unanswered = pending != address_notices_.end() && pending->rank == rank;
            std::uint16_t known = unanswered ? pending->old_lid : previous;
            if (auto unheard = unheard_lids_.find(rank); unheard != unheard_lids_.end()) {
                known = unheard->second;  // it never heard of the change before that one either
                unheard_lids_.erase(unheard);
            }
            notices.push_back({rank, known, 0, now, config_.first_retry_us, now + config_.connect_timeout_us});
        }
    } catch (...) {  // out of memory: peers find out when their traffic toward the old LID fails
        host_.note("out of memory announcing LID " + std::to_string(new_lid) + " to the job");
    }
    address_notices_.swap(notices);
    host_.note("this port's LID changed from " + std::to_string(previous) + " to " + std::to_string(new_lid) +
               ": telling " + std::to_string(address_notices_.size()) + " processes");
    resend_addresses(now);
    host_.timers_changed();
}

void ConnectionManager::resend_addresses(std::uint64_t now) noexcept {
    std::size_t sent = 0;
    for (std::size_t i = 0; i < address_notices_.size();) {
        AddressNotice &n = address_notices_[i];
        const PortAddress *to = nullptr;
        const bool expired = now >= n.deadline_us && !held_;
        if (!expired && (now < n.next_retry_us || sent >= kAddressBurst)) {
            ++i;
            continue;
        }
        if (!expired) to = host_.address_of(n.rank);
        if (to == nullptr) {  // no answer in time, or no xrc address there: nobody to tell
            if (expired) {
                host_.note("gave up telling rank " + std::to_string(n.rank) + " this port's new LID " +
                           std::to_string(announced_lid_));
                try {
                    unheard_lids_[n.rank] = n.old_lid;  // told again with a PROBE to it (send_probes)
                } catch (...) {  // out of memory: that rank's datagrams from here are dropped there
                }
            }
            n = address_notices_.back();  // order does not matter: no O(n) erase per notice
            address_notices_.pop_back();
            continue;
        }
        if (n.attempts++ > 0) ++counters_->cm_retransmissions;
        send(*to, address_to(n.rank, *to, n.old_lid));
        ++sent;
        n.next_retry_us = now + n.retry_us;
        n.retry_us = std::min(n.retry_us * 2, config_.max_retry_us);
        ++i;
    }
}

CmMessage ConnectionManager::address_to(std::uint32_t rank, const PortAddress &to,
                                        std::uint16_t old_lid) const noexcept {
    CmMessage m;
    m.type = CmType::Address;
    m.dst_rank = rank;
    m.token = to.token;
    m.generation = announcements_;
    m.port_guid = config_.my_port;
    m.old_lid = old_lid;
    m.new_lid = announced_lid_;
    return m;
}

void ConnectionManager::tell_address_again(std::uint32_t rank, const PortAddress &to) noexcept {
    const auto unheard = unheard_lids_.find(rank);
    if (unheard == unheard_lids_.end()) return;
    ++counters_->cm_retransmissions;
    send(to, address_to(rank, to, unheard->second));
}

// on_datagram accepted its source: the stored address of the sender has m.old_lid and the datagram came from
// m.new_lid, or the stored address has m.new_lid already (a retransmission, or another rank of that node told us).
void ConnectionManager::on_address(const CmMessage &m, const PortAddress &from) noexcept {
    // The port as it was known before the move: an identity without a port GUID includes the LID.
    PortAddress before;
    std::copy(std::begin(from.gid), std::end(from.gid), before.gid);
    before.node_id = from.node_id;
    before.lid = m.old_lid;
    if (port_identity(before) != m.port_guid || (from.lid != m.old_lid && from.lid != m.new_lid)) {
        ++counters_->cm_rejected;
        host_.note("dropped an ADDRESS from rank " + std::to_string(m.src_rank) +
                   ": it names a port or LID its address does not have");
        return;
    }
    if (from.lid == m.new_lid) {
        ++counters_->cm_duplicates;
    } else {
        // `from` is among the stored addresses: it says the new LID from here on, and so does the answer's target.
        host_.address_moved(m.port_guid, m.old_lid, m.new_lid);
        ++counters_->peer_lid_changes;
        host_.note("rank " + std::to_string(m.src_rank) + "'s port moved from LID " + std::to_string(m.old_lid) +
                   " to " + std::to_string(m.new_lid));
        migrate_toward(m.port_guid, m.old_lid, m.new_lid);
    }
    CmMessage a;
    a.type = CmType::AddressAck;
    a.dst_rank = m.src_rank;
    a.token = from.token;
    a.generation = m.generation;
    a.port_guid = m.port_guid;
    a.old_lid = m.old_lid;
    a.new_lid = m.new_lid;
    send(from, a);
}

// Every QP of ours whose path goes to the port: the link's INI QP, the TGT QPs we made for its ranks, and the
// handles we hold. Which TGT QPs and handles are the port's, their own paths say (a handle's sender is not
// recorded): one query each, O(TGT QPs held), on the control path. A TGT QP whose
// creator left is moved through a handle: every process is told, so every holder moves it (the second finds it
// moved already). A link still connecting needs nothing: its INI QP is readied later toward the updated address.
void ConnectionManager::migrate_toward(std::uint64_t port, std::uint16_t old_lid, std::uint16_t new_lid) noexcept {
    auto move = [&](ibv_qp *qp, const char *what) {
        const auto moved = host_.migrate_path(qp, old_lid, new_lid);
        if (!moved) {
            // Its sends then fail through their completions, which name the peer.
            host_.note(std::string("cannot move ") + what + " QP " + std::to_string(qp->qp_num) + " to LID " +
                       std::to_string(new_lid) + ": " + moved.error().message());
            return;
        }
        if (*moved) ++counters_->paths_migrated;
    };
    if (auto it = links_.find(port); it != links_.end() && it->second->ini_ && it->second->tgt_qpn_ != 0)
        move(it->second->ini_.get(), "INI");
    for (const auto &[k, t] : owned_) move(t.tgt.get(), "TGT");
    for (const auto &[qpn, h] : opened_) move(h.handle.get(), "TGT (handle)");
}

void ConnectionManager::on_address_ack(const CmMessage &m) noexcept {
    if (m.generation != announcements_ || m.new_lid != announced_lid_ || m.port_guid != config_.my_port) {
        ++counters_->cm_stale;  // for an earlier announcement
        return;
    }
    unheard_lids_.erase(m.src_rank);
    for (AddressNotice &n : address_notices_) {
        if (n.rank != m.src_rank) continue;
        n = address_notices_.back();
        address_notices_.pop_back();
        return;
    }
    ++counters_->cm_duplicates;
}

}  // namespace xrc
