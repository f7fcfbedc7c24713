// SPDX-License-Identifier: BSD-3-Clause
#include "connection_manager.h"

#include "operation_text.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>

namespace xrc {

NodeLink::NodeLink(ConnectionManager &cm, std::uint64_t port, std::uint32_t node, std::uint32_t owner,
                   std::uint32_t depth, std::uint32_t signal_interval)
    : cm_(cm),
      port_(port),
      node_(node),
      owner_(owner),
      queue_(depth, signal_interval, node, &NodeLink::blocked, this) {}

void NodeLink::blocked(void *self) noexcept {
    auto *link = static_cast<NodeLink *>(self);
    ConnectionManager::Guard g(link->cm_);
    link->cm_.wanted(*link);
}

const char *link_state_name(NodeLink::State state) noexcept {
    switch (state) {
        case NodeLink::State::idle:
            return "idle";
        case NodeLink::State::waiting:
            return "waiting";
        case NodeLink::State::connecting:
            return "connecting";
        case NodeLink::State::connected:
            return "connected";
        case NodeLink::State::draining:
            return "draining";
        case NodeLink::State::failed:
            return "failed";
    }
    return "unknown";
}

ConnectionManager::ConnectionManager(CmHost &host, const CmConfig &config) : host_(host), config_(config) {}

ConnectionManager::~ConnectionManager() {
    // INI QPs (in the links), then TGT QPs and handles: all through the host, before it goes.
    std::uint64_t open = owned_.size() + opened_.size();
    for (const auto &[node, link] : links_) open += link->ini_ && link->tgt_qpn_ != 0;
    count_connections_closed(*counters_, open);
    counters_->ini_qps = counters_->tgt_qps = counters_->tgt_handles = 0;
    links_.clear();
    owned_.clear();
    opened_.clear();
}

NodeLink &ConnectionManager::link_for(std::uint64_t port, std::uint32_t node, std::uint32_t owner) {
    Guard g(*this);
    return link_for_locked(port, node, owner);
}

NodeLink &ConnectionManager::link_for_locked(std::uint64_t port, std::uint32_t node, std::uint32_t owner) {
    auto &slot = links_[port];
    if (!slot) {
        // Listed only once told what its queue keeps and rides: a sender that finds it must find it whole.
        auto made = std::make_unique<NodeLink>(*this, port, node, owner, config_.queue_depth, config_.signal_interval);
        if (config_.requeue_refused) made->queue_.requeue_refused();
        made->queue_.keep_copies(config_.kept_copy_bytes);
        if (config_.outage_limit_us != 0) made->queue_.ride_outages();
        slot = std::move(made);
    }
    return *slot;
}

void ConnectionManager::attach(Peer &peer, NodeLink &link) {
    Guard g(*this);
    peer.link = &link;
    peer.queue = &link.queue_;
    // A connection under way (or made) before this peer existed: its first message still has to say so.
    peer.imm_flags = kImmFirst;
    link.peers_.push_back(&peer);
}

void ConnectionManager::detach(Peer &peer) noexcept {
    Guard g(*this);
    if (peer.link == nullptr) return;
    auto &peers = peer.link->peers_;
    peers.erase(std::remove(peers.begin(), peers.end(), &peer), peers.end());
    try {
        for (const SrqEntry &srq : peer.srqs) peer.link->departed_srqs_.emplace_back(srq.srq_num, peer.rank);
    } catch (...) {  // out of memory: what is queued for it is taken for no rank's (kept, and counted if lost)
    }
    peer.link = nullptr;
}

std::uint32_t NodeLink::rank_of_srq(std::uint32_t srqn) const noexcept {
    for (const Peer *peer : peers_)
        for (const SrqEntry &srq : peer->srqs)
            if (srq.srq_num == srqn) return peer->rank;
    for (const auto &[number, rank] : departed_srqs_)
        if (number == srqn) return rank;
    return UINT32_MAX;
}

void ConnectionManager::unlist(std::vector<NodeLink *> &list, NodeLink &link) noexcept {
    list.erase(std::remove(list.begin(), list.end(), &link), list.end());
}

void ConnectionManager::connect(NodeLink &link) noexcept {
    Guard g(*this);
    connect_locked(link);
}

void ConnectionManager::connect_locked(NodeLink &link) noexcept {
    if (link.state_ != NodeLink::State::idle || finalizing_ || abandoned_) return;
    if (config_.max_ini_qps != 0 && live_ini_ >= config_.max_ini_qps) return;
    start_later(link);
}

void ConnectionManager::start_later(NodeLink &link) noexcept {
    if (link.start_pending_) return;
    try {
        to_start_.push_back(&link);
        link.start_pending_ = true;
    } catch (...) {  // out of memory: as if no QP could be made
        fail(link, "out of memory while starting a connection");
    }
}

// The links wanted since the last tick get their INI QP and first CONNECT (under the manager's mutex only).
void ConnectionManager::start_wanted() noexcept {
    Guard g(*this);
    std::vector<NodeLink *> links;
    links.swap(to_start_);
    for (NodeLink *link : links) {
        link->start_pending_ = false;
        if (link->state_ != NodeLink::State::idle || abandoned_) continue;
        if (config_.max_ini_qps != 0 && live_ini_ >= config_.max_ini_qps) {
            link->state_ = NodeLink::State::waiting;  // room is made by the next tick
            waiting_.push_back(link);
            continue;
        }
        (void)start(*link);
    }
}

// A send queued on a link that is not open: connect it, making room under the cap first if needed.
void ConnectionManager::wanted(NodeLink &link) noexcept {
    if (link.state_ != NodeLink::State::idle) return;
    if (drop_for_finalized(link, "its destination said it is finalizing")) return;
    move_off_unusable_owner(link);
    if (abandoned_) {  // its sends fail (upward: another rail takes them), nothing is made on this one
        fail(link, "this rail was given up");
        return;
    }
    if (config_.max_ini_qps != 0 && live_ini_ >= config_.max_ini_qps) {
        link.state_ = NodeLink::State::waiting;
        waiting_.push_back(&link);
        (void)make_room();
        return;
    }
    start_later(link);
}

bool ConnectionManager::start(NodeLink &link) noexcept {
    if (dead_ranks_.count(link.owner_) != 0) {
        // The rank chosen to make the TGT QP died before the connection was made (peer_died came before the link
        // or its peers existed): through a live rank of the node. None known yet (the link made ahead of its peers):
        // left idle, started again when a send wants it.
        const std::uint32_t next = live_rank_of(link);
        if (next == UINT32_MAX) return false;
        link.owner_ = next;
    }
    const PortAddress *owner = host_.address_of(link.owner_);
    if (owner == nullptr) {
        fail(link, "rank " + std::to_string(link.owner_) + " published no usable xrc address");
        return false;
    }
    // The owner makes the TGT QP in its own node's XRC domain, where the SRQ numbers of the link's peers must name
    // their queues: an owner on another port would deliver to whichever ranks hold those numbers there.
    if (port_identity(*owner) != link.port_) {
        fail(link, "rank " + std::to_string(link.owner_) + " is not on the HCA port this connection goes to");
        return false;
    }
    if (!host_.reserve_completions(live_ini_ + 1)) {
        fail(link, "the completion queue cannot grow for another connection");
        return false;
    }
    const auto qp = host_.create_ini();
    if (!qp) {
        fail(link, qp.error().message());
        return false;
    }
    link.ini_ = HostQp(&host_, *qp);
    ++live_ini_;
    counters_->ini_qps = live_ini_;
    counters_->ini_qps_peak = std::max<std::uint64_t>(counters_->ini_qps_peak, live_ini_);
    link.generation_ = ++next_generation_;
    link.tgt_qpn_ = 0;
    link.holder_ = kCmNoRank;
    link.fence_posted_ = false;
    link.leave_ = NodeLink::Leave::none;
    link.unfenced_ = false;
    link.state_ = NodeLink::State::connecting;
    link.creator_gone_ = false;
    const std::uint64_t now = host_.now_us();
    link.attempts_ = 0;
    link.retry_us_ = std::min(config_.first_retry_us + connecting_.size() * config_.retry_per_connecting_us,
                              std::max(config_.first_retry_us, config_.max_retry_us));
    const bool rotated = link.inherited_deadline_us_ != 0;
    link.deadline_us_ =
        std::max(rotated ? link.inherited_deadline_us_ : now + config_.connect_timeout_us, link.outage_until_us_);
    link.inherited_deadline_us_ = 0;
    // One rotation per attempt: silence from one rank may be its leaving, but silence from a second one too is more
    // likely a slow path (every datagram between the nodes late), and the rest of the timeout is its to answer in.
    link.rotate_at_us_ =
        rotated ? link.deadline_us_
                : now + (config_.rotate_after_us != 0 ? config_.rotate_after_us : config_.connect_timeout_us / 4);
    connecting_.push_back(&link);
    ++counters_->connection_attempts;
    send_connect(link, now);
    host_.timers_changed();
    return true;
}

void ConnectionManager::send(const PortAddress &to, CmMessage message) noexcept {
    message.jobid = config_.jobid;
    message.src_rank = config_.my_rank;
    message.port_index = config_.port_index;
    ++counters_->cm_datagrams_sent;
    host_.send_datagram(to, encode_cm(message));
}

CmMessage ConnectionManager::request_to(CmType type, std::uint32_t rank, const PortAddress &to,
                                        std::uint32_t generation, std::uint32_t ini_qpn, std::uint32_t tgt_qpn,
                                        std::uint32_t named) noexcept {
    CmMessage m;
    m.type = type;
    m.dst_rank = rank;
    m.token = to.token;
    m.generation = generation;
    m.ini_qpn = ini_qpn;
    m.tgt_qpn = tgt_qpn;
    m.named_rank = named;
    return m;
}

void ConnectionManager::close_once(std::uint32_t rank, std::uint32_t generation, std::uint32_t ini_qpn,
                                   std::uint32_t tgt_qpn) noexcept {
    if (const PortAddress *to = host_.address_of(rank); to != nullptr)
        send(*to, request_to(CmType::Close, rank, *to, generation, ini_qpn, tgt_qpn));
}

void ConnectionManager::send_connect(NodeLink &link, std::uint64_t now) noexcept {
    const PortAddress *owner = host_.address_of(link.owner_);
    if (owner == nullptr) return;
    const CmMessage m = request_to(CmType::Connect, link.owner_, *owner, link.generation_, link.ini_qpn());
    if (link.attempts_ > 0) ++counters_->cm_retransmissions;
    ++link.attempts_;
    send(*owner, m);
    link.next_retry_us_ = now + link.retry_us_;
    link.retry_us_ = std::min(link.retry_us_ * 2, config_.max_retry_us);
}

// The link's INI QP goes (a connected one counts as a connection closed).
void ConnectionManager::drop_ini(NodeLink &link) noexcept {
    if (!link.ini_) return;
    if (link.tgt_qpn_ != 0) count_connections_closed(*counters_, 1);
    link.ini_.reset();
    counters_->ini_qps = --live_ini_;
}

bool ConnectionManager::drop_for_finalized(NodeLink &link, const std::string &why) noexcept {
    if (!finalizing_ || !link.queue_.has_pending() || !only_for_finalized(link)) return false;
    abandon(link);
    try {
        Deferred drop{Deferred::Kind::drop, &link, link.generation_, {}, {}, 0, 0, 0, {}};
        drop.why = why + "; every one is for a rank in MPI_Finalize";
        deferred_.push_back(std::move(drop));
    } catch (...) {  // out of memory: as before, the sends fail
        fail(link, why);
    }
    return true;
}

// A connection that carries no send yet (made ahead of need: eager mode, or back toward an initiator) goes back to
// idle quietly; one that sends are waiting for has failed.
void ConnectionManager::give_up(NodeLink &link, const std::string &why) noexcept {
    if (drop_for_finalized(link, why)) return;
    if (link.queue_.has_pending()) {
        fail(link, finalizing_ ? why + " (" + describe_pending(link) + ")" : why);
        probe_later(link);  // unanswered: the path may come back (its traffic goes over another rail meanwhile)
        return;
    }
    abandon(link);
    host_.note("connection to node " + std::to_string(link.node_) + " not made (nothing to send yet): " + why);
}

// An attempt given up after its CONNECT went out: the target may have made a TGT QP (its ACCEPT lost or late), so
// it is told to close it (`tgt_qpn` when known, 0: whatever it made for that generation).
void ConnectionManager::retract(NodeLink &link, std::uint32_t tgt_qpn) noexcept {
    if (link.attempts_ == 0 || link.state_ != NodeLink::State::connecting) return;
    notice(link.owner_, link.generation_, link.ini_qpn(), tgt_qpn);
}

void ConnectionManager::notice(std::uint32_t rank, std::uint32_t generation, std::uint32_t ini_qpn,
                               std::uint32_t tgt_qpn) noexcept {
    if (abandoned_) return;  // nothing goes out through a rail given up, and nothing is waited for
    // A rank in its finalize drops what it made for us at its end anyway, and may have left this rail already.
    if (finalized_ranks_->contains(rank)) {
        close_once(rank, generation, ini_qpn, tgt_qpn);
        return;
    }
    for (const CloseNotice &n : notices_)
        if (n.rank == rank && n.generation == generation) return;
    const std::uint64_t now = host_.now_us();
    notices_.push_back(
        {rank, generation, ini_qpn, tgt_qpn, 0, now, config_.first_retry_us, now + config_.connect_timeout_us});
}

bool ConnectionManager::rotate_silent(NodeLink &link, std::uint64_t now) noexcept {
    const std::uint32_t next = live_rank_of(link);
    if (next == UINT32_MAX) {
        link.rotate_at_us_ = link.deadline_us_;  // nobody else to ask: the deadline decides
        return false;
    }
    // Told once, not waited for (it may have left): drop what you made for this attempt, if anything.
    close_once(link.owner_, link.generation_, link.ini_qpn(), 0);
    host_.note("rank " + std::to_string(link.owner_) + "'s connection manager has not answered " +
               std::to_string(link.attempts_) + " CONNECT datagrams: connecting to node " + std::to_string(link.node_) +
               " through rank " + std::to_string(next) + " (" +
               std::to_string((link.deadline_us_ - std::min(now, link.deadline_us_)) / 1000) + " ms left)");
    ++counters_->cm_rotations;
    const std::uint64_t deadline = link.deadline_us_;
    abandon(link);
    link.owner_ = next;
    link.inherited_deadline_us_ = deadline;
    start_later(link);
    return true;
}

// A connection attempt ends without an answer that counts: back to idle, queued sends stay queued.
void ConnectionManager::abandon(NodeLink &link) noexcept {
    unlist(connecting_, link);
    drop_ini(link);
    link.state_ = NodeLink::State::idle;
}

void ConnectionManager::fail(NodeLink &link, const std::string &why) noexcept {
    drop_ini(link);
    unlist(connecting_, link);
    unlist(connected_, link);
    unlist(draining_, link);
    unlist(waiting_, link);
    link.state_ = NodeLink::State::failed;
    link.opening_ = false;
    ++counters_->connection_failures;
    // Reported and its sends completed by tick(), outside the mutex: their owners may send again from there.
    try {
        deferred_.push_back({Deferred::Kind::fail, &link, link.generation_, why, {}, 0, 0, 0, {}});
    } catch (...) {
        deferred_.push_back({Deferred::Kind::fail, &link, link.generation_, {}, {}, 0, 0, 0, {}});
    }
}

// Stops posting on a connected link and posts the fence that retires what was posted unsignaled.
void ConnectionManager::close(NodeLink &link) noexcept {
    unlist(connected_, link);
    link.state_ = NodeLink::State::draining;
    link.queue_.stop();
    draining_.push_back(&link);
}

void ConnectionManager::finish_close(NodeLink &link) noexcept {
    unlist(draining_, link);
    // Idle: whatever was posted before LEAVING is retired, so its answer goes now if it has not yet.
    if (link.leave_ == NodeLink::Leave::retiring || link.leave_ == NodeLink::Leave::fenced) answer_leaving(link);
    const bool target_left = link.target_left();
    link.leave_ = NodeLink::Leave::none;
    link.unfenced_ = false;
    link.queue_.detach();
    const std::uint32_t ini_qpn = link.ini_qpn();
    drop_ini(link);
    link.state_ = NodeLink::State::idle;
    // The TGT QP's creator and every rank that was sent a first message over this connection (and so may hold a
    // handle on the TGT QP) drop it; acknowledged, retransmitted until then. At finalize too: the creator keeps
    // the TGT QP until then, so that nothing this process posted is lost to a target node that left first.
    const std::uint64_t now = host_.now_us();
    // Another job's processes usually leave for good while this one goes on (spawned children exit): one that
    // does not answer within the leaving wait is taken as gone, rather than holding finalize for the connect
    // timeout. If it was alive after all, its handle on the TGT QP goes at its own exit; our INI QP is gone already.
    // Ranks holding a handle on a TGT QP whose creator died wait for no CLOSE of ours, and may have left.
    const std::uint64_t patience =
        config_.other_job || link.creator_gone_ ? config_.leaving_wait_us : config_.connect_timeout_us;
    auto notify = [&](std::uint32_t rank) {
        if (dead_ranks_.count(rank) != 0) return;  // its handles went with it
        // At finalize, a rank that only holds a handle (not the creator, who waits for this CLOSE in its own
        // finalize) is told once and not waited for: it waits for nobody's CLOSE and may have left already, and
        // if it has not, its handle goes at its own finalize, which the job's is.
        if (finalizing_ && (rank != link.owner_ || link.creator_gone_)) {
            close_once(rank, link.generation_, ini_qpn, link.tgt_qpn_);
            return;
        }
        notices_.push_back(
            {rank, link.generation_, ini_qpn, link.tgt_qpn_, 0, now, config_.first_retry_us, now + patience});
    };
    if (!target_left) notify(link.owner_);
    bool holder_told = link.holder_ == kCmNoRank || link.holder_ == link.owner_;
    for (const Peer *peer : link.peers_)
        if (peer->rank != link.owner_ && (peer->imm_flags & kImmFirst) == 0) {
            notify(peer->rank);
            holder_told = holder_told || peer->rank == link.holder_;
        }
    if (!holder_told) notify(link.holder_);
    link.creator_gone_ = false;
    resend_notices(now);
    host_.timers_changed();
    // What is prepared from now on goes over the next connection: its first message to each peer says so.
    for (Peer *peer : link.peers_) peer->imm_flags = kImmFirst;
    host_.note("closed the connection to node " + std::to_string(link.node_) + " (through rank " +
               std::to_string(link.owner_) + ")");
    if (link.queue_.has_pending()) wanted(link);
}

// The least recently used connected link without queued sends is drained (a clock: a link used since the hand
// last passed it gets another round).
bool ConnectionManager::make_room() noexcept {
    if (!draining_.empty()) return true;  // one is on its way out already
    for (std::size_t step = 0; step < 2 * connected_.size(); ++step) {
        clock_hand_ %= connected_.size();
        NodeLink &candidate = *connected_[clock_hand_];
        if (candidate.opening_) {  // its queue is not even open yet
            ++clock_hand_;
            continue;
        }
        if (candidate.queue_.used()) {
            candidate.queue_.clear_used();
            ++clock_hand_;
            continue;
        }
        if (candidate.queue_.has_pending()) {
            ++clock_hand_;
            continue;
        }
        ++counters_->evictions;
        host_.note("evicting the connection to node " + std::to_string(candidate.node_) +
                   " (btl_xrc_max_ini_qps reached)");
        close(candidate);
        return true;
    }
    return false;
}

void ConnectionManager::tick() noexcept {
    // A datagram or the timers wait for the mutex (ServingGuard): their turn first; progress comes back.
    if (serving_waiting_.load(std::memory_order_acquire) != 0) return;
    std::vector<Deferred> work;
    host_.lock_queues();
    {
        Guard g(*this);
        // Recorded work first: an ACCEPT that arrived while this process computed connects the link before its
        // deadline is looked at.
        work.swap(deferred_);
    }
    run_deferred(work);
    {
        Guard g(*this);
        tick_locked(host_.now_us());
        work.clear();
        work.swap(deferred_);
    }
    run_deferred(work);
    host_.unlock_queues();
    start_wanted();
}

void ConnectionManager::run_deferred(std::vector<Deferred> &work) noexcept {
    for (Deferred &d : work) {
        switch (d.kind) {
            case Deferred::Kind::open: {
                NodeLink &link = *d.link;
                ibv_qp *qp = nullptr;
                std::uint32_t tgt_qpn = 0;
                {
                    Guard g(*this);
                    if (link.opening_ && link.state_ == NodeLink::State::connected &&
                        link.generation_ == d.generation && !held_) {
                        qp = link.ini_.get();
                        tgt_qpn = link.tgt_qpn_;
                    }
                    link.opening_ = false;
                    // Its creator said LEAVING before this process opened the queue (it did not progress): nothing
                    // was posted, and the TGT QP may be gone already (the creator stops waiting at its bound) unless
                    // a node-mate holds it, and none received through it yet. The connection goes unused; what
                    // waits goes over a new one.
                    if (qp != nullptr && link.target_left()) {
                        host_.note("rank " + std::to_string(link.owner_) +
                                   " said LEAVING before the connection to node " + std::to_string(link.node_) +
                                   " carried anything: it goes unused");
                        ack_leaving(link);  // nothing was posted: nothing to retire
                        to_idle(link);      // the queued sends keep their first-message flags for the next one
                        if (link.queue_.has_pending()) wanted(link);
                        qp = nullptr;
                    }
                }
                if (qp == nullptr) break;
                // Queued sends go out; a post that fails completes its send here, outside the mutex.
                link.queue_.open(qp, tgt_qpn);
                Guard g(*this);
                if (finalizing_ && link.state_ == NodeLink::State::connected) close(link);
                break;
            }
            case Deferred::Kind::fail:
                // Said first: the queued sends' owners may end the process when they hear of their failure.
                host_.link_failed(*d.link, d.why);
                d.link->queue_.fail(IBV_WC_RETRY_EXC_ERR);
                break;
            case Deferred::Kind::reject: {
                Guard g(*this);
                answer_reject(d.message);
                break;
            }
            case Deferred::Kind::reciprocate: {
                Guard g(*this);
                if (!finalizing_) connect_locked(link_for_locked(d.port, d.node, d.rank));
                break;
            }
            case Deferred::Kind::drop_dead: {
                const auto for_dead = [&d](const SendOp &op) {
                    return std::find(d.srqns.begin(), d.srqns.end(), op.wr.qp_type.xrc.remote_srqn) != d.srqns.end();
                };
                const std::size_t dropped = d.link->queue_.drop_pending_if(for_dead, IBV_WC_REM_ABORT_ERR);
                if (dropped != 0)
                    host_.note("dropped " + std::to_string(dropped) + " send(s) queued for rank(s) " + d.why +
                               ", which died");
                break;
            }
            case Deferred::Kind::orphaned:
                orphaned(*d.link, d.generation);
                break;
            case Deferred::Kind::node_dead:
                // For the dead only: their owners are told nothing (a send to a dead process calls nobody back).
                d.link->queue_.fail(IBV_WC_REM_ABORT_ERR);
                break;
            case Deferred::Kind::revive: {
                bool revived = false;
                {
                    Guard g(*this);
                    const bool broken = d.link->state_ == NodeLink::State::failed ||
                                        (d.link->state_ == NodeLink::State::connected && d.link->queue_.broken());
                    if (broken && !abandoned_ && !finalizing_) {
                        restart_failed(*d.link);
                        revived = true;
                        host_.note("connection to node " + std::to_string(d.link->node_) + " usable again: " + d.why);
                    }
                }
                if (revived) host_.link_revived(*d.link);
                break;
            }
            case Deferred::Kind::drop: {
                // Completed as flushed, outside the mutex (their owners may be called); lost to nobody.
                const std::size_t dropped = d.link->queue_.drop_pending(IBV_WC_WR_FLUSH_ERR);
                if (dropped != 0)
                    host_.note("dropped " + std::to_string(dropped) + " send(s) queued for node " +
                               std::to_string(d.link->node_) + ": " + d.why);
                break;
            }
        }
    }
}

std::uint64_t ConnectionManager::tick_timers() noexcept {
    ServingGuard g(*this);
    const std::uint64_t now = host_.now_us();
    std::uint64_t next = UINT64_MAX;
    for (NodeLink *link : connecting_) {
        if (now >= link->next_retry_us_) send_connect(*link, now);
        next = std::min(next, link->next_retry_us_);
    }
    resend_notices(now);
    for (const CloseNotice &n : notices_) next = std::min(next, n.next_retry_us);
    resend_addresses(now);
    for (const AddressNotice &n : address_notices_) next = std::min(next, n.next_retry_us);
    resend_leaving(now);
    for (const auto &[k, t] : owned_)
        if (t.leaving) next = std::min(next, t.next_leaving_us);
    send_probes(now);
    if (!held_)
        for (const NodeLink *link : probing_) next = std::min(next, link->next_probe_us_);
    return next;
}

void ConnectionManager::tick_locked(std::uint64_t now) noexcept {
    for (std::size_t i = 0; i < connecting_.size();) {
        NodeLink &link = *connecting_[i];
        if (now >= link.deadline_us_ && !held_) {
            retract(link, 0);
            const bool outage = link.outage_until_us_ != 0;
            give_up(link,
                    "no answer from rank " + std::to_string(link.owner_) + "'s connection manager within " +
                        std::to_string((outage ? config_.outage_limit_us : config_.connect_timeout_us) / 1000000) +
                        " s (" + std::to_string(link.attempts_) + " CONNECT datagrams sent" +
                        (outage ? ", connecting again after a timeout: btl_xrc_outage_limit)" : ")"));
            continue;  // give_up() removed it from the list
        }
        if (now >= link.rotate_at_us_ && !held_ && link.outage_until_us_ == 0 && rotate_silent(link, now)) continue;
        if (now >= link.next_retry_us_) send_connect(link, now);
        ++i;
    }
    // Before the drains: a link whose creator is leaving fences toward it (if in time) rather than forgetting.
    if (!leaving_.empty())
        for (NodeLink *link : std::vector<NodeLink *>(leaving_)) settle_leaving(*link, now);  // may unlist it
    for (std::size_t i = 0; i < draining_.size();) {
        NodeLink &link = *draining_[i];
        if (link.queue_.broken()) {
            fail(link, "the connection failed while it was being closed");
            continue;
        }
        // The TGT QP's creator left: its SRQ is gone (or going), and a fence naming it would put the shared TGT QP
        // in error for every rank still holding it; no other rank of that node promises to keep its SRQ either.
        // Every send posted since LEAVING arrived is signaled, and what was posted before was retired by the fence
        // its answer waited for. When that answer came too late for a fence (this process did not progress while
        // the creator waited, or the port was down), unsignaled sends, to any rank of that node, may still be
        // outstanding and only the HCA knows whether they were acknowledged: the INI QP is kept until its retry
        // budget has passed with the port up. A request unacknowledged by then has failed with an error
        // completion, which breaks the queue (above: reported as lost); so the others were acknowledged.
        if (link.unfenced_ && !link.fence_posted_ && unfenced_retired(link, now)) link.queue_.forget_unsignaled();
        if (link.queue_.needs_fence() && !link.fence_posted_ && !held_ && !link.target_left()) {
            const PortAddress *owner = host_.address_of(link.owner_);
            make_fence(link.fence_, owner != nullptr ? owner->srqs.front().srq_num : 0, &NodeLink::fence_done);
            link.fence_posted_ = link.queue_.post_fence(link.fence_) == 0;
        }
        if (link.queue_.idle()) {
            finish_close(link);
            continue;
        }
        ++i;
    }
    while (!waiting_.empty() && (config_.max_ini_qps == 0 || live_ini_ < config_.max_ini_qps)) {
        NodeLink &link = *waiting_.front();
        waiting_.erase(waiting_.begin());
        link.state_ = NodeLink::State::idle;
        start_later(link);
    }
    if (!waiting_.empty() && draining_.empty()) (void)make_room();
    resend_notices(now);
    resend_leaving(now);
    resend_addresses(now);
    resend_holds(now);
}

void ConnectionManager::resend_notices(std::uint64_t now) noexcept {
    for (std::size_t i = 0; i < notices_.size();) {
        CloseNotice &n = notices_[i];
        const PortAddress *to = host_.address_of(n.rank);
        if (to == nullptr || (now >= n.deadline_us && !held_)) {
            host_.note("gave up telling rank " + std::to_string(n.rank) + " to close TGT QP " +
                       std::to_string(n.tgt_qpn));
            notices_.erase(notices_.begin() + static_cast<std::ptrdiff_t>(i));
            continue;
        }
        if (now >= n.next_retry_us) {
            const CmMessage m = request_to(CmType::Close, n.rank, *to, n.generation, n.ini_qpn, n.tgt_qpn);
            if (n.attempts > 0) ++counters_->cm_retransmissions;
            ++n.attempts;
            send(*to, m);
            n.next_retry_us = now + n.retry_us;
            n.retry_us = std::min(n.retry_us * 2, config_.max_retry_us);
        }
        ++i;
    }
}

// Sends the BTL accepted are delivered even when the process finalizes right after: a connection still being
// made (or waiting for room) completes and drains like the others; only reciprocal connects are not started.
void ConnectionManager::begin_finalize() noexcept {
    Guard g(*this);
    finalizing_ = true;
    probing_.clear();  // what comes back now carries nothing
    for (NodeLink *link : std::vector<NodeLink *>(connected_)) close(*link);
    // A connection still being made that nothing waits to send on has nothing to deliver: waiting for its answer
    // would hold this finalize up to the connect timeout when the target's own finalize is over (nothing reads its
    // connection manager any more). The target is told once to drop what it may have made for the attempt.
    for (NodeLink *link : std::vector<NodeLink *>(connecting_)) {
        if (link->queue_.has_pending()) continue;
        if (link->attempts_ > 0) close_once(link->owner_, link->generation_, link->ini_qpn(), 0);
        give_up(*link, "this process is finalizing");
    }
}

CmMessage ConnectionManager::reply_to(const CmMessage &request, CmType type) const noexcept {
    CmMessage m;
    m.type = type;
    m.dst_rank = request.src_rank;
    m.generation = request.generation;
    m.ini_qpn = request.ini_qpn;
    return m;
}

void ConnectionManager::on_datagram(std::span<const std::uint8_t> bytes, std::uint16_t slid,
                                    std::uint32_t src_qp) noexcept {
    ServingGuard g(*this);
    ++counters_->cm_datagrams_received;
    const auto decoded = decode_cm(bytes);
    if (!decoded) {
        ++counters_->cm_rejected;
        host_.note("dropped a connection manager datagram: " + decoded.error().message());
        return;
    }
    const CmMessage &m = *decoded;
    // For this process, from this job, by someone who read our token from the modex. The token is this port's
    // own, so it also says which of our ports the sender paired with (by fabric: port_index is the sender's
    // position and need not equal ours).
    if (m.jobid != peer_jobid() || m.dst_rank != config_.my_rank || m.token != config_.my_token) {
        ++counters_->cm_rejected;
        host_.note(std::string("dropped a ") + cm_type_name(m.type) + " that is not for this process (job, rank, " +
                   "port or token differ)");
        return;
    }
    // From the process it names: its modex address has this UD source. An ADDRESS comes from the LID it announces:
    // that source is accepted when the stored address still has the LID it says the port had.
    // (Another job's rank may have our number: it is not us.)
    const PortAddress *from =
        config_.other_job || m.src_rank != config_.my_rank ? host_.address_of(m.src_rank) : nullptr;
    const bool moved = from != nullptr && m.type == CmType::Address && from->lid == m.old_lid && slid == m.new_lid;
    if (from == nullptr) {
        // Not fetched yet (the service thread reads only what progress fetched) or no such rank: a live sender
        // retransmits, and is answered once its address is here.
        ++counters_->cm_rejected;
        host_.note(std::string("dropped a ") + cm_type_name(m.type) + " from rank " + std::to_string(m.src_rank) +
                   ": its address is not known here (yet)");
        return;
    }
    if ((from->lid != slid && !moved) || from->cm_qpn != src_qp) {
        ++counters_->cm_rejected;
        host_.note(std::string("dropped a ") + cm_type_name(m.type) + " claiming to come from rank " +
                   std::to_string(m.src_rank) + " (LID " + std::to_string(slid) + ", QP " + std::to_string(src_qp) +
                   "): its address here is LID " + std::to_string(from->lid) + ", QP " + std::to_string(from->cm_qpn));
        return;
    }
    switch (m.type) {
        case CmType::Connect:
            on_connect(m, *from);
            break;
        case CmType::Accept:
            on_accept(m, *from);
            break;
        case CmType::Reject:
            on_reject(m);
            break;
        case CmType::Close:
            on_close(m, *from);
            break;
        case CmType::CloseAck:
            on_close_ack(m);
            break;
        case CmType::Leaving:
            on_leaving(m);
            break;
        case CmType::LeavingAck:
            on_leaving_ack(m);
            break;
        case CmType::Address:
            on_address(m, *from);
            break;
        case CmType::AddressAck:
            on_address_ack(m);
            break;
        case CmType::Hold:
            on_hold(m, *from);
            break;
        case CmType::Held:
            on_held(m);
            break;
        case CmType::Release:
            on_release(m, *from);
            break;
        case CmType::Probe:
            on_probe(m, *from);
            break;
        case CmType::ProbeAck:
            on_probe_ack(m, *from);
            break;
    }
}

void ConnectionManager::on_connect(const CmMessage &m, const PortAddress &from) noexcept {
    const std::uint64_t k = key(m.src_rank, m.generation);
    if (auto it = owned_.find(k); it != owned_.end()) {
        if (it->second.ini_qpn != m.ini_qpn) {
            ++counters_->cm_stale;
            host_.note("ignored a CONNECT from rank " + std::to_string(m.src_rank) + " (generation " +
                       std::to_string(m.generation) + ", INI QP " + std::to_string(m.ini_qpn) +
                       "): that generation came with INI QP " + std::to_string(it->second.ini_qpn));
            return;
        }
        ++counters_->cm_duplicates;  // our ACCEPT was lost or is still on its way: the same answer again
        const OwnedTgt &t = it->second;
        host_.note(
            "rank " + std::to_string(m.src_rank) + " asked again for TGT QP " + std::to_string(t.tgt.get()->qp_num) +
            " (generation " + std::to_string(m.generation) + "): " +
            (t.accepted ? "answered again" : "its answer waits for rank " + std::to_string(t.holder) + " to hold it"));
        if (t.accepted) accept(it->second);  // (not before its holder holds it: resend_holds)
        return;
    }
    if (auto it = closed_generation_.find(m.src_rank); it != closed_generation_.end() && m.generation <= it->second) {
        ++counters_->cm_stale;  // a late copy of a connection that was closed since
        host_.note("ignored a CONNECT from rank " + std::to_string(m.src_rank) + " (generation " +
                   std::to_string(m.generation) + "): its generation " + std::to_string(it->second) +
                   " was closed already");
        return;
    }
    if (dead_ranks_.count(m.src_rank) != 0) {
        ++counters_->cm_stale;  // sent before its sender died: nobody would ever use or close what it makes
        host_.note("ignored a CONNECT from rank " + std::to_string(m.src_rank) + ", known here to have died");
        return;
    }
    CmMessage r = reply_to(m, CmType::Reject);
    r.token = from.token;
    if (finalizing_) {
        r.reason = CmReject::Finalizing;
        send(from, r);
        return;
    }
    if (abandoned_) {  // no TGT QP on a rail given up: the sender's traffic goes over another one
        r.reason = CmReject::Resources;
        send(from, r);
        return;
    }
    const auto made = host_.create_tgt(from, m.ini_qpn);
    if (!made) {
        host_.note("cannot accept rank " + std::to_string(m.src_rank) + "'s connection: " + made.error().message());
        r.reason = CmReject::Resources;
        send(from, r);
        return;
    }
    ibv_qp *const tgt = *made;
    // A sender has one connection to this node at a time, and its generations only grow: a TGT QP we hold for an
    // older one of its connections is stale (its CLOSE was lost, or never sent), destroyed now.
    for (auto it = owned_.begin(); it != owned_.end();) {
        if (it->second.sender == m.src_rank && it->second.generation < m.generation) {
            host_.note("destroying TGT QP " + std::to_string(it->second.tgt.get()->qp_num) + " of rank " +
                       std::to_string(m.src_rank) + "'s connection generation " +
                       std::to_string(it->second.generation) + " (superseded by generation " +
                       std::to_string(m.generation) + ")");
            it = release_owned(it);
        } else {
            ++it;
        }
    }
    // Our link to the sender's node may have failed (its port was down past the retry budget, or past the grace):
    // a CONNECT from there says the path works again, so a failed link starts over (progress looks, under the
    // queues' lock: whether its queue broke is the data path's to say).
    if (auto back = links_.find(port_identity(from)); back != links_.end())
        revive_later(*back->second, "a CONNECT came from it");
    drop_held_handles(m.src_rank, m.generation);
    OwnedTgt &made_now =
        owned_.emplace(k, OwnedTgt{m.src_rank, m.generation, m.ini_qpn, HostQp(&host_, tgt)}).first->second;
    owned_qpns_[tgt->qp_num] = m.src_rank;
    ++counters_->tgt_qps;
    count_connection_opened(*counters_);
    ask_holder(made_now, host_.now_us());
    if (config_.reciprocate && (config_.other_job || port_identity(from) != config_.my_port)) {
        try {  // not here: starting a connection may grow the completion queue that progress polls
            deferred_.push_back(
                {Deferred::Kind::reciprocate, nullptr, 0, {}, {}, from.node_id, m.src_rank, port_identity(from), {}});
        } catch (...) {  // out of memory: the reverse connection is made by the first send instead
        }
    }
}

void ConnectionManager::on_accept(const CmMessage &m, const PortAddress &from) noexcept {
    for (NodeLink *link : connecting_) {
        if (link->generation_ != m.generation) continue;
        if (link->owner_ != m.src_rank || link->ini_qpn() != m.ini_qpn) break;
        const auto connected = host_.connect_ini(link->ini_.get(), from, m.tgt_qpn);
        if (!connected) {
            retract(*link, m.tgt_qpn);
            fail(*link, connected.error().message());
            return;
        }
        link->tgt_qpn_ = m.tgt_qpn;
        link->holder_ = m.named_rank;
        link->outage_until_us_ = 0;
        unlist(connecting_, *link);
        connected_.push_back(link);
        link->state_ = NodeLink::State::connected;
        link->opening_ = true;
        count_connection_opened(*counters_);
        host_.note("connected to node " + std::to_string(link->node_) + " through rank " +
                   std::to_string(link->owner_) + " (INI QP " + std::to_string(m.ini_qpn) + " -> TGT QP " +
                   std::to_string(m.tgt_qpn) + ", " + std::to_string(link->attempts_) + " CONNECT datagrams)");
        // The queue is opened (and queued sends go out) by tick(), in progress, unless the port is held (then
        // resume() opens it): sends that queue meanwhile keep their order behind the others.
        try {
            deferred_.push_back({Deferred::Kind::open, link, link->generation_, {}, {}, 0, 0, 0, {}});
        } catch (...) {  // out of memory: the link cannot carry anything
            fail(*link, "out of memory while opening the connection");
        }
        return;
    }
    // Connected already (a retransmitted CONNECT was answered twice): nothing to do. Otherwise the attempt it
    // answers was given up (no answer in time) or replaced: the TGT QP made for it would live until the target's
    // finalize, so it is closed.
    for (const auto &[port, link] : links_) {
        if (link->owner_ == m.src_rank && link->generation_ == m.generation && link->tgt_qpn_ == m.tgt_qpn) {
            ++counters_->cm_duplicates;
            return;
        }
    }
    ++counters_->cm_stale;
    host_.note("closing TGT QP " + std::to_string(m.tgt_qpn) + " that rank " + std::to_string(m.src_rank) +
               " made for a connection attempt given up since (a late ACCEPT)");
    notice(m.src_rank, m.generation, m.ini_qpn, m.tgt_qpn);
    resend_notices(host_.now_us());
}

// Answered by tick(): whether to try another rank depends on the link's queued sends.
void ConnectionManager::on_reject(const CmMessage &m) noexcept {
    try {
        deferred_.push_back({Deferred::Kind::reject, nullptr, 0, {}, m, 0, 0, 0, {}});
    } catch (...) {  // out of memory: as if it was lost (the CONNECT is retransmitted)
    }
}

void ConnectionManager::answer_reject(const CmMessage &m) noexcept {
    for (NodeLink *link : connecting_) {
        if (link->generation_ != m.generation || link->owner_ != m.src_rank || link->ini_qpn() != m.ini_qpn) continue;
        const std::string why =
            std::string("rank ") + std::to_string(m.src_rank) + " refused the connection: " + cm_reject_name(m.reason);
        if (m.reason == CmReject::Finalizing) {
            finalized_ranks_->add(m.src_rank);
            if (drop_for_finalized(*link, why)) return;
        }
        // The rank chosen to make the TGT QP is leaving, but sends wait for other ranks of its node: through one
        // of them instead.
        if (m.reason == CmReject::Finalizing && link->queue_.has_pending()) {
            if (const std::uint32_t next = live_rank_of(*link); next != UINT32_MAX) {
                NodeLink &l = *link;
                abandon(l);
                l.owner_ = next;
                host_.note(why + "; connecting through rank " + std::to_string(next) + " instead");
                start_later(l);
                return;
            }
        }
        give_up(*link, why);
        return;
    }
    ++counters_->cm_stale;
}

void ConnectionManager::node_died(std::uint32_t rank) noexcept {
    Guard g(*this);
    const PortAddress *address = host_.address_of(rank);
    if (address == nullptr) return;
    if (const auto found = links_.find(port_identity(*address)); found != links_.end())
        retire_dead_node(*found->second);
}

// The node-mates that received through a dead initiator's TGT QP opened handles on it, which keep it in the HCA
// until their finalize: only its creator knows whose it is, so it tells them all (not the dead, nor other jobs:
// their ranks are not our node-mates).
void ConnectionManager::release_node_mates(const OwnedTgt &t) noexcept {
    if (config_.other_job) return;
    const std::uint32_t tgt_qpn = t.tgt.get()->qp_num;
    for (const std::uint32_t mate : config_.node_mates) {
        if (mate == config_.my_rank || dead_ranks_.count(mate) != 0) continue;
        if (const PortAddress *to = host_.address_of(mate); to != nullptr)
            send(*to, request_to(CmType::Release, mate, *to, t.generation, t.ini_qpn, tgt_qpn, t.sender));
    }
}

void ConnectionManager::on_release(const CmMessage &m, const PortAddress &from) noexcept {
    // Only the creator, a node-mate, can say whose a TGT QP of this node's domain is.
    if (config_.other_job || handle_keeper_ != nullptr || port_identity(from) != config_.my_port) {
        ++counters_->cm_rejected;
        host_.note("dropped a RELEASE from rank " + std::to_string(m.src_rank) + ", which is not on this node's port");
        return;
    }
    auto it = opened_.find(m.tgt_qpn);
    if (it == opened_.end() || it->second.ini_qpn != m.ini_qpn) return;  // never received through it, or let go
    host_.note("released the handle on TGT QP " + std::to_string(m.tgt_qpn) + ": its initiator, rank " +
               std::to_string(m.named_rank) + ", died (its creator, rank " + std::to_string(m.src_rank) + ", says)");
    release_opened(it);
    host_.source_closed(m.tgt_qpn, m.ini_qpn);
}

void ConnectionManager::move_off_unusable_owner(NodeLink &link) noexcept {
    if (!usable(link.owner_))
        if (const std::uint32_t next = live_rank_of(link); next != UINT32_MAX) link.owner_ = next;
}

std::uint32_t ConnectionManager::live_rank_of(const NodeLink &link) const noexcept {
    for (const Peer *peer : link.peers_)
        if (peer->rank != link.owner_ && usable(peer->rank)) return peer->rank;
    // After del_procs (finalize), what is still queued may be for ranks whose peers are gone: they are the node's too.
    for (const auto &[srqn, rank] : link.departed_srqs_)
        if (rank != link.owner_ && usable(rank) && host_.address_of(rank) != nullptr) return rank;
    return UINT32_MAX;
}

void ConnectionManager::peer_died(std::uint32_t rank) noexcept {
    Guard g(*this);
    try {
        if (!dead_ranks_.insert(rank).second) return;
    } catch (...) {  // out of memory: not remembered, so what follows may happen again later; done now anyway
    }
    for (auto it = owned_.begin(); it != owned_.end();) {
        if (it->second.sender != rank) {
            ++it;
            continue;
        }
        release_node_mates(it->second);
        it = release_owned(it);
    }
    drop_held_handles(rank, UINT32_MAX);
    std::erase_if(notices_, [rank](const CloseNotice &n) { return n.rank == rank; });
    std::erase_if(address_notices_, [rank](const AddressNotice &n) { return n.rank == rank; });
    // SRQ numbers are the node's HCA's: only what is queued on the link to the dead rank's port names them.
    const PortAddress *address = host_.address_of(rank);
    const std::uint64_t dead_port = address != nullptr ? port_identity(*address) : 0;
    std::vector<std::uint32_t> srqns;
    try {
        if (address != nullptr)
            for (const SrqEntry &srq : address->srqs) srqns.push_back(srq.srq_num);
        auto &known = dead_srqns_[dead_port];
        known.insert(known.end(), srqns.begin(), srqns.end());
    } catch (...) {  // out of memory: its queued sends go out and are refused one by one
    }
    const auto found = links_.find(dead_port);  // the one link to its node (links are keyed by port)
    if (address == nullptr || found == links_.end()) return;
    NodeLink &link = *found->second;
    if (!srqns.empty()) drop_dead_later(link, srqns, std::to_string(rank));
    if (link.owner_ != rank) return;
    // The rank holding the TGT QP too, if it lives: the link's CLOSE goes to it then.
    const bool holder_lives =
        link.holder_ != kCmNoRank && usable(link.holder_) && link.state_ != NodeLink::State::connecting;
    const std::uint32_t next = holder_lives ? link.holder_ : live_rank_of(link);
    if (next != UINT32_MAX) {
        host_.note("rank " + std::to_string(rank) + " died: the connection to node " + std::to_string(link.node_) +
                   " goes through rank " + std::to_string(next) + " from now on");
        link.owner_ = next;
    }
    if (link.state_ == NodeLink::State::connected && !live_rank_holds(link)) {
        orphan(link);
        return;
    }
    if (next == UINT32_MAX) return;  // nobody left there to connect through: its sends are dropped above
    if (link.state_ == NodeLink::State::connected || link.state_ == NodeLink::State::draining)
        link.creator_gone_ = true;
    if (link.state_ == NodeLink::State::connected) retire_unsignaled(link);
    if (link.state_ == NodeLink::State::connecting) {
        abandon(link);
        if (link.queue_.has_pending()) start_later(link);
    }
}

void ConnectionManager::retire_unsignaled(NodeLink &link) noexcept {
    SendQueue &queue = link.queue_;
    if (!link.ini_ || queue.qp() == nullptr || queue.broken()) return;
    queue.signal_every_post();
    if (!queue.needs_fence() || link.fence_posted_ || held_) return;
    if (!live_rank_holds(link)) {
        queue.forget_unsignaled();
        return;
    }
    const PortAddress *owner = host_.address_of(link.owner_);
    if (owner == nullptr) return;
    make_fence(link.fence_, owner->srqs.front().srq_num, &NodeLink::fence_done);
    link.fence_posted_ = queue.post_fence(link.fence_) == 0;  // EAGAIN: a signaled one is outstanding
}

bool ConnectionManager::live_rank_holds(const NodeLink &link) const noexcept {
    if (link.holder_ != kCmNoRank && link.holder_ == link.owner_ && dead_ranks_.count(link.holder_) == 0) return true;
    for (const Peer *peer : link.peers_)
        if (dead_ranks_.count(peer->rank) == 0 && (peer->imm_flags & kImmFirst) == 0) return true;
    return false;
}

void ConnectionManager::orphan(NodeLink &link) noexcept {
    try {
        deferred_.push_back({Deferred::Kind::orphaned, &link, link.generation_, {}, {}, 0, 0, 0, {}});
    } catch (...) {  // out of memory: as before, its next request to a live rank times out and reconnect() moves it
        link.creator_gone_ = true;
        return;
    }
    link.queue_.stop();  // nothing more goes to the QP: what is queued from now on waits for the next connection
    host_.note("no live rank of node " + std::to_string(link.node_) + " holds TGT QP " + std::to_string(link.tgt_qpn_) +
               " any more: its connection goes, and what waits for the node's live ranks goes over a new one");
}

// The link's connection is gone without a close (its INI QP with it): idle, ready for the next one.
void ConnectionManager::to_idle(NodeLink &link) noexcept {
    unlist(connected_, link);
    unlist(draining_, link);
    unlist(leaving_, link);
    link.opening_ = false;
    link.fence_posted_ = false;
    link.leave_ = NodeLink::Leave::none;
    link.unfenced_ = false;
    drop_ini(link);
    link.state_ = NodeLink::State::idle;
}

void ConnectionManager::orphaned(NodeLink &link, std::uint32_t generation) noexcept {
    // Outside the mutex (their owners may send again): everything posted was for the dead.
    link.queue_.abort_outstanding(IBV_WC_REM_ABORT_ERR);
    Guard g(*this);
    if (link.generation_ != generation || link.state_ != NodeLink::State::connected) return;
    link.creator_gone_ = false;
    to_idle(link);
    // Both ends count the next connection from 0; a ring write may have claimed a slot it never filled.
    restart_peers(link, RingAfter::stopped);
    if (link.queue_.has_pending()) wanted(link);
}

// A node that crashed answers nothing: its connection's requests would be retried for the whole retry budget, and a
// flush or finalize would wait for them, for messages nobody will receive. Only when every rank of the node died:
// a rank this process has not sent to yet may attach to the link later.
void ConnectionManager::retire_dead_node(NodeLink &link) noexcept {
    if (link.node_dead_) return;
    link.node_dead_ = true;
    unlist(probing_, link);
    unlist(connecting_, link);
    unlist(connected_, link);
    unlist(draining_, link);
    unlist(waiting_, link);
    unlist(leaving_, link);
    link.queue_.detach();  // nothing is posted to the INI QP from here on
    drop_ini(link);
    link.state_ = NodeLink::State::failed;
    link.opening_ = false;
    link.fence_posted_ = false;
    link.leave_ = NodeLink::Leave::none;
    host_.note("every rank of node " + std::to_string(link.node_) +
               " died: its connection goes, with what it still carried for them");
    try {
        deferred_.push_back({Deferred::Kind::node_dead, &link, link.generation_, {}, {}, 0, 0, 0, {}});
    } catch (...) {  // out of memory: its requests stay outstanding (nothing waits for them: node_dead())
    }
}

bool ConnectionManager::release_broken_tgt(std::uint32_t tgt_qpn) noexcept {
    Guard g(*this);
    for (auto it = owned_.begin(); it != owned_.end(); ++it)
        if (it->second.tgt.get()->qp_num == tgt_qpn) {
            host_.note("released TGT QP " + std::to_string(tgt_qpn) + " (error state): " + describe(it->second));
            release_owned(it);
            return true;
        }
    if (auto it = opened_.find(tgt_qpn); it != opened_.end()) {
        host_.note("released the handle on TGT QP " + std::to_string(tgt_qpn) + " (error state)");
        release_opened(it);
        return true;
    }
    return false;
}

NodeLink *ConnectionManager::link_with_queue_locked(const SendQueue &queue) const noexcept {
    for (const auto &[port, link] : links_)
        if (&link->queue_ == &queue) return link.get();
    return nullptr;
}

void ConnectionManager::restart_failed(NodeLink &link) noexcept {
    unlist(probing_, link);
    unlist(connecting_, link);
    unlist(connected_, link);
    unlist(draining_, link);
    unlist(waiting_, link);
    unlist(leaving_, link);
    drop_ini(link);
    link.state_ = NodeLink::State::idle;
    link.opening_ = false;
    link.start_pending_ = false;
    link.fence_posted_ = false;
    link.unfenced_ = false;
    link.leave_ = NodeLink::Leave::none;
    link.creator_gone_ = false;
    link.outage_until_us_ = 0;
    link.queue_.reset();
    // Every copy of what the broken connection held went over another rail when it broke: its peers' rings may be
    // written again once their readers, having judged those copies, agree where the writes stopped.
    restart_peers(link, RingAfter::paused);
    for (Peer *peer : link.peers_) peer->copies_queued();
}

bool ConnectionManager::revive() noexcept {
    host_.lock_queues();
    std::vector<NodeLink *> revived;
    bool done = false;
    {
        Guard g(*this);
        if (abandoned_ && !finalizing_) {
            try {
                revived.reserve(links_.size());
                done = true;
            } catch (...) {  // out of memory: the rail stays given up
            }
        }
        if (done) {
            abandoned_ = false;
            held_ = false;
            for (auto &[port, link] : links_) {
                if (link->node_dead_) continue;  // nobody there to reach again
                restart_failed(*link);
                revived.push_back(link.get());
            }
        }
    }
    for (NodeLink *link : revived) host_.link_revived(*link);
    host_.unlock_queues();
    if (done) host_.timers_changed();
    return done;
}

void ConnectionManager::queue_broke(const SendQueue &queue) noexcept {
    if (!config_.probe_broken_links) return;
    Guard g(*this);
    if (NodeLink *link = link_with_queue_locked(queue); link != nullptr) probe_later(*link);
}

void ConnectionManager::probe_later(NodeLink &link) noexcept {
    if (!worth_probing(link)) return;
    if (std::find(probing_.begin(), probing_.end(), &link) != probing_.end()) return;
    try {
        probing_.push_back(&link);
    } catch (...) {  // out of memory: its traffic stays on the rail it moved to
        return;
    }
    // Broken again soon after an answer brought it back (a path that answers datagrams but loses acknowledgements):
    // the interval goes on growing, so that such a path costs a connection's retry budget per interval at most.
    const std::uint64_t now = host_.now_us();
    const bool again = link.probe_answered_us_ != 0 && now - link.probe_answered_us_ < config_.max_probe_us;
    link.probe_retry_us_ = again ? std::min(link.probe_retry_us_ * 2, config_.max_probe_us) : config_.first_probe_us;
    link.next_probe_us_ = now + link.probe_retry_us_;
    host_.timers_changed();
}

void ConnectionManager::send_probes(std::uint64_t now) noexcept {
    for (std::size_t i = 0; i < probing_.size();) {
        NodeLink &link = *probing_[i];
        if (!worth_probing(link)) {
            probing_.erase(probing_.begin() + static_cast<std::ptrdiff_t>(i));
            continue;
        }
        ++i;
        // Nothing leaves through a port that is down; the interval starts again once it is back (resume()).
        if (held_ || now < link.next_probe_us_) continue;
        if (const PortAddress *to = host_.address_of(link.owner_); to != nullptr) {
            tell_address_again(link.owner_, *to);
            send(*to, request_to(CmType::Probe, link.owner_, *to, probe_generation(link), 0));
        }
        link.probe_retry_us_ = std::min(link.probe_retry_us_ * 2, config_.max_probe_us);
        link.next_probe_us_ = now + link.probe_retry_us_;
    }
}

void ConnectionManager::hand_over_riding(const std::function<bool(const NodeLink &)> &reached_elsewhere) noexcept {
    host_.lock_queues();
    bool any = false;
    {
        Guard g(*this);
        if (!abandoned_ && !finalizing_)
            for (auto &[port, owned] : links_) {
                NodeLink &link = *owned;
                const bool riding = link.outage_until_us_ != 0 && (link.state_ == NodeLink::State::idle ||
                                                                   link.state_ == NodeLink::State::connecting);
                if (!riding || link.node_dead_ || !reached_elsewhere(link)) continue;
                retract(link, 0);
                link.outage_until_us_ = 0;
                fail(link, "another rail reaches node " + std::to_string(link.node_) +
                               " again: its traffic goes there rather than wait for this connection");
                probe_later(link);
                any = true;
            }
    }
    host_.unlock_queues();
    if (any) host_.timers_changed();
}

void ConnectionManager::revive_later(NodeLink &link, std::string why) noexcept {
    try {
        deferred_.push_back({Deferred::Kind::revive, &link, 0, std::move(why), {}, 0, 0, 0, {}});
    } catch (...) {  // out of memory: its traffic stays where it moved
    }
}

// A node whose connection to us broke asks whether we are reachable: this datagram says its path to us works again,
// and the answer tells it ours does. Our own link to that node, if it broke too, starts over (as on a CONNECT).
void ConnectionManager::on_probe(const CmMessage &m, const PortAddress &from) noexcept {
    CmMessage a = reply_to(m, CmType::ProbeAck);  // no QP named: a PROBE's ini_qpn is 0 (decode_cm)
    a.token = from.token;
    send(from, a);
    if (auto back = links_.find(port_identity(from)); back != links_.end())
        revive_later(*back->second, "a PROBE came from it");
}

void ConnectionManager::on_probe_ack(const CmMessage &m, const PortAddress &from) noexcept {
    auto it = links_.find(port_identity(from));
    if (it == links_.end()) return;
    NodeLink &link = *it->second;
    // An answer to a probe of this broken link (not a late one of an earlier break, which a reconnect has taken off
    // the list since).
    if (std::find(probing_.begin(), probing_.end(), &link) == probing_.end() || m.generation != probe_generation(link))
        return;
    unlist(probing_, link);
    link.probe_answered_us_ = host_.now_us();
    revive_later(link, "it answered a PROBE");
}

void ConnectionManager::restart_streams(const SendQueue &queue, bool timed_out) noexcept {
    Guard g(*this);
    if (NodeLink *link = link_with_queue_locked(queue); link != nullptr)
        restart_peers(*link, timed_out ? RingAfter::paused : RingAfter::kept);
}

void ConnectionManager::restart_peers(NodeLink &link, RingAfter ring) noexcept {
    for (Peer *peer : link.peers_) peer->next_connection(ring);
}

void ConnectionManager::reconnect(const SendQueue &queue, bool timed_out) noexcept {
    Guard g(*this);
    NodeLink *found = link_with_queue_locked(queue);
    if (found == nullptr || !found->ini_) return;
    NodeLink &link = *found;
    to_idle(link);
    if (timed_out) {
        for (Peer *peer : link.peers_) peer->copies_queued();
        link.outage_until_us_ = host_.now_us() + config_.outage_limit_us;
        ++counters_->reconnections;
        host_.note("requests to node " + std::to_string(link.node_) + " went unacknowledged for the retry budget: " +
                   "connecting again through rank " + std::to_string(link.owner_) + " for up to " +
                   std::to_string(config_.outage_limit_us / 1000000) + " s");
        if (link.queue_.has_pending()) wanted(link);
        return;
    }
    move_off_unusable_owner(link);
    host_.note("a request to node " + std::to_string(link.node_) + " was refused: connecting again (through rank " +
               std::to_string(link.owner_) + ") for what followed it");
    // What was posted to the dead before its death was known came back with the rest: it goes, not out again.
    if (auto dead = dead_srqns_.find(link.port_); dead != dead_srqns_.end() && !dead->second.empty())
        drop_dead_later(link, dead->second, "that died");
    if (link.queue_.has_pending()) wanted(link);
}

void ConnectionManager::drop_dead_later(NodeLink &link, const std::vector<std::uint32_t> &srqns,
                                        const std::string &who) noexcept {
    try {
        deferred_.push_back({Deferred::Kind::drop_dead, &link, link.generation_, who, {}, 0, 0, 0, srqns});
    } catch (...) {  // out of memory: those sends go out and are refused one by one
    }
}

bool ConnectionManager::only_for_finalized(const NodeLink &link) const noexcept {
    return link.queue_.all_pending([&](const SendOp &op) {
        const std::uint32_t rank = link.rank_of_srq(op.wr.qp_type.xrc.remote_srqn);
        return rank != UINT32_MAX && finalized_ranks_->contains(rank);  // not a rank's: kept
    });
}

std::string ConnectionManager::describe_pending(const NodeLink &link) const noexcept {
    try {
        std::string text;
        std::size_t count = 0;
        link.queue_.all_pending([&](const SendOp &op) {
            if (++count > 4) return true;
            const std::uint32_t rank = link.rank_of_srq(op.wr.qp_type.xrc.remote_srqn);
            const std::string whom = rank != UINT32_MAX
                                         ? "rank " + std::to_string(rank)
                                         : "SRQ " + std::to_string(op.wr.qp_type.xrc.remote_srqn) + " of no known rank";
            char detail[64] = "";
            if (op.wr.num_sge > 0 && op.wr.sg_list[0].length > 0)  // the header's first byte says what it carries
                std::snprintf(detail, sizeof(detail), ", imm 0x%x, first byte 0x%02x", ntohl(op.wr.imm_data),
                              *reinterpret_cast<const unsigned char *>(op.wr.sg_list[0].addr));
            text += (text.empty() ? "" : ", ") + whom + " (" + describe_operation(op.wr) + detail + ")";
            return true;
        });
        return std::to_string(count) + " queued: " + text + (count > 4 ? ", ..." : "");
    } catch (...) {
        return "what is queued not described (out of memory)";
    }
}

void ConnectionManager::on_close(const CmMessage &m, const PortAddress &from) noexcept {
    // tgt_qpn 0: the initiator gave up before it heard which TGT QP we made (if any).
    if (auto it = owned_.find(key(m.src_rank, m.generation));
        it != owned_.end() && it->second.ini_qpn == m.ini_qpn &&
        (m.tgt_qpn == 0 || it->second.tgt.get()->qp_num == m.tgt_qpn)) {
        release_owned(it);
    }
    // Also when nothing was made (yet): a copy of the CONNECT still on its way must not make a TGT QP nobody uses.
    auto &newest = closed_generation_[m.src_rank];
    newest = std::max(newest, m.generation);
    if (m.tgt_qpn != 0) host_.source_closed(m.tgt_qpn, m.ini_qpn);
    if (handle_keeper_ != nullptr) {
        handle_keeper_->drop_handle(m.tgt_qpn, m.ini_qpn);
    } else if (auto it = opened_.find(m.tgt_qpn); it != opened_.end() && it->second.ini_qpn == m.ini_qpn) {
        release_opened(it);
    }
    CmMessage a = reply_to(m, CmType::CloseAck);  // also for a CLOSE seen before: its ACK was lost
    a.token = from.token;
    a.tgt_qpn = m.tgt_qpn;
    send(from, a);
}

// The creator of our link's TGT QP leaves finalize before we closed the link (alive but slow here). The link still
// works toward the node's other ranks while one of them holds a handle, but its close can no longer fence toward
// the creator: from now on every send is signaled (its completion retires it, no fence needed), and what was posted
// before is retired by a fence toward the creator's SRQ while the creator still waits for our answer (tick()).
// Serving side: the send queue is not touched here beyond its signal interval (a relaxed store).
void ConnectionManager::on_leaving(const CmMessage &m) noexcept {
    for (auto &[port, link] : links_) {
        if (link->owner_ != m.src_rank || link->generation_ != m.generation || link->ini_qpn() != m.ini_qpn ||
            link->tgt_qpn_ != m.tgt_qpn)
            continue;
        if (link->target_left()) {  // a retransmission: our answer was lost, or is not due yet
            ++counters_->cm_duplicates;
            if (link->leave_ == NodeLink::Leave::answered) answer_leaving(*link);
            return;
        }
        finalized_ranks_->add(m.src_rank);  // in its BTL finalize: nothing it receives goes up any more
        link->queue_.signal_every_post();
        link->left_at_us_ = host_.now_us();
        link->leave_ = NodeLink::Leave::retiring;
        try {
            leaving_.push_back(link.get());
        } catch (...) {  // out of memory: no fence; the creator stops waiting at its bound
            link->leave_ = NodeLink::Leave::answered;
            answered_unfenced(*link);
        }
        host_.note("rank " + std::to_string(m.src_rank) + " is leaving with TGT QP " + std::to_string(m.tgt_qpn) +
                   " of the link to node " + std::to_string(link->node_) +
                   " still open: every send on it is signaled from now on, it closes without a fence");
        return;
    }
    ++counters_->cm_stale;
}

// Progress (tick_locked, under the queues' lock): the fence, then the answer once it completed.
void ConnectionManager::settle_leaving(NodeLink &link, std::uint64_t now) noexcept {
    if (link.leave_ == NodeLink::Leave::answered || link.leave_ == NodeLink::Leave::none) {
        unlist(leaving_, link);
        return;
    }
    SendQueue &queue = link.queue_;
    const bool live = link.ini_ && queue.qp() != nullptr && !queue.broken() &&
                      (link.state_ == NodeLink::State::connected || link.state_ == NodeLink::State::draining);
    if (live && link.leave_ == NodeLink::Leave::retiring) {
        if (!queue.needs_fence() || link.fence_posted_) {
            // Retired by a signaled request already posted (a drain fence among them, if one went out).
            link.leave_mark_ = queue.posted();
            link.leave_ = NodeLink::Leave::fenced;
        } else if (now - link.left_at_us_ < config_.leaving_wait_us / 2) {
            if (held_) return;  // the port is down: the fence waits for it, within the creator's wait
            const PortAddress *owner = host_.address_of(link.owner_);
            if (owner == nullptr) {
                link.leave_ = NodeLink::Leave::answered;
                answered_unfenced(link);
                unlist(leaving_, link);
                return;
            }
            make_fence(link.fence_, owner->srqs.front().srq_num, &NodeLink::fence_done);
            if (queue.post_fence(link.fence_) != 0) return;  // no credit: a signaled one is outstanding
            link.fence_posted_ = true;
            link.leave_mark_ = queue.posted();
            link.leave_ = NodeLink::Leave::fenced;
        } else {
            // Too late: the creator stops waiting about now, and a fence reaching its SRQ after it is gone would
            // put the TGT QP in error for every rank of its node. The close forgets what only a fence retires.
            host_.note("LEAVING from rank " + std::to_string(link.owner_) + " answered " +
                       std::to_string((now - link.left_at_us_) / 1000) +
                       " ms after it arrived (this process did not progress): no fence toward it");
        }
    }
    if (live && link.leave_ == NodeLink::Leave::fenced && !queue.retired(link.leave_mark_)) return;
    if (link.leave_ != NodeLink::Leave::fenced) answered_unfenced(link);
    answer_leaving(link);
}

bool ConnectionManager::unfenced_retired(const NodeLink &link, std::uint64_t now) const noexcept {
    if (held_ || config_.retry_budget_us == 0) return false;  // no retransmission while down; 0: no bound
    return now - std::max(link.unfenced_since_us_, resumed_at_us_) >= config_.retry_budget_us;
}

void ConnectionManager::answered_unfenced(NodeLink &link) noexcept {
    link.unfenced_ = true;
    link.unfenced_since_us_ = host_.now_us();
}

void ConnectionManager::ack_leaving(const NodeLink &link) noexcept {
    if (const PortAddress *owner = host_.address_of(link.owner_); owner != nullptr)
        send(*owner,
             request_to(CmType::LeavingAck, link.owner_, *owner, link.generation_, link.ini_qpn(), link.tgt_qpn_));
}

void ConnectionManager::answer_leaving(NodeLink &link) noexcept {
    link.leave_ = NodeLink::Leave::answered;
    unlist(leaving_, link);
    ack_leaving(link);
    // The creator drops the TGT QP on this answer (or at the end of its wait): it lives on only through the handle of
    // a node-mate that was sent a first message on it. Without one, a send posted from now on would go into a QP
    // the node's HCA no longer has: the connection closes (what it carried drains), and what queues meanwhile goes
    // over a new connection through a rank that is not leaving.
    if (link.state_ == NodeLink::State::connected && !mate_holds(link)) {
        host_.note("no rank of node " + std::to_string(link.node_) + " but the leaving rank " +
                   std::to_string(link.owner_) + " holds TGT QP " + std::to_string(link.tgt_qpn_) +
                   ": its connection closes, what follows goes over a new one");
        close(link);
    }
}

bool ConnectionManager::mate_holds(const NodeLink &link) const noexcept {
    for (const Peer *peer : link.peers_)
        if (peer->rank != link.owner_ && dead_ranks_.count(peer->rank) == 0 && (peer->imm_flags & kImmFirst) == 0)
            return true;
    return false;
}

std::string ConnectionManager::describe(const OwnedTgt &t) const {
    return "rank " + std::to_string(t.sender) + "'s INI QP " + std::to_string(t.ini_qpn) + " (TGT QP " +
           std::to_string(t.tgt.get()->qp_num) + ")";
}

std::string ConnectionManager::leave_initiators() noexcept {
    Guard g(*this);
    std::string left;
    if (abandoned_) return left;  // nobody can answer through it, and finished() does not wait for them
    const std::uint64_t now = host_.now_us();
    for (auto &[k, t] : owned_) {
        if (!t.leaving) {
            t.leaving = true;
            t.next_leaving_us = now;
            t.leaving_retry_us = config_.first_retry_us;
            ++awaiting_leaving_ack_;
        }
        if (!left.empty()) left += "; ";
        left += describe(t);
    }
    resend_leaving(now);
    host_.timers_changed();
    return left;
}

void ConnectionManager::resend_leaving(std::uint64_t now) noexcept {
    if (awaiting_leaving_ack_ == 0) return;
    for (auto &[k, t] : owned_) {
        if (!t.leaving || now < t.next_leaving_us) continue;
        const PortAddress *to = host_.address_of(t.sender);
        if (to == nullptr) continue;
        if (t.leaving_attempts++ > 0) ++counters_->cm_retransmissions;
        send(*to, request_to(CmType::Leaving, t.sender, *to, t.generation, t.ini_qpn, t.tgt.get()->qp_num));
        t.next_leaving_us = now + t.leaving_retry_us;
        t.leaving_retry_us = std::min(t.leaving_retry_us * 2, config_.max_retry_us);
    }
}

std::string ConnectionManager::drop_initiators() noexcept {
    Guard g(*this);
    std::string left;
    for (auto it = owned_.begin(); it != owned_.end(); it = release_owned(it)) {
        if (!left.empty()) left += "; ";
        left += describe(it->second);
    }
    return left;
}

std::string ConnectionManager::drop_initiator(std::uint32_t sender) noexcept {
    Guard g(*this);
    std::string left;
    for (auto it = owned_.begin(); it != owned_.end();) {
        if (it->second.sender != sender) {
            ++it;
            continue;
        }
        if (!left.empty()) left += "; ";
        left += describe(it->second);
        it = release_owned(it);
    }
    return left;
}

// The initiator retired what it had posted toward this node: its TGT QP (our handle on it) can go.
void ConnectionManager::on_leaving_ack(const CmMessage &m) noexcept {
    if (auto it = owned_.find(key(m.src_rank, m.generation)); it != owned_.end() && it->second.leaving &&
                                                              it->second.ini_qpn == m.ini_qpn &&
                                                              it->second.tgt.get()->qp_num == m.tgt_qpn) {
        host_.note("rank " + std::to_string(m.src_rank) + " answered LEAVING: dropping TGT QP " +
                   std::to_string(m.tgt_qpn));
        release_owned(it);
        return;
    }
    ++counters_->cm_stale;  // a late copy, or for a TGT QP dropped since (its CLOSE came first, or our bound)
}

ConnectionManager::OwnedTgts::iterator ConnectionManager::release_owned(OwnedTgts::iterator it) noexcept {
    owned_qpns_.erase(it->second.tgt.get()->qp_num);
    if (it->second.leaving) --awaiting_leaving_ack_;
    if (!it->second.accepted) --awaiting_held_;
    --counters_->tgt_qps;
    count_connections_closed(*counters_, 1);
    return owned_.erase(it);
}

ConnectionManager::OpenedTgts::iterator ConnectionManager::release_opened(OpenedTgts::iterator it) noexcept {
    --counters_->tgt_handles;
    count_connections_closed(*counters_, 1);
    return opened_.erase(it);
}

void ConnectionManager::on_close_ack(const CmMessage &m) noexcept {
    for (std::size_t i = 0; i < notices_.size(); ++i) {
        const CloseNotice &n = notices_[i];
        if (n.rank == m.src_rank && n.generation == m.generation && n.tgt_qpn == m.tgt_qpn) {
            notices_.erase(notices_.begin() + static_cast<std::ptrdiff_t>(i));
            return;
        }
    }
    ++counters_->cm_duplicates;
}

void ConnectionManager::hold() noexcept {
    host_.lock_queues();  // the links' send queues are their users' (lock order: queues, then the manager)
    {
        Guard g(*this);
        if (!held_) {
            held_ = true;
            for (NodeLink *link : connected_) link->queue_.stop();
        }
    }
    host_.unlock_queues();
}

void ConnectionManager::resume() noexcept {
    std::vector<NodeLink *> reopen;
    host_.lock_queues();
    {
        Guard g(*this);
        if (held_ && !abandoned_) {
            held_ = false;
            const std::uint64_t now = host_.now_us();
            resumed_at_us_ = now;
            for (NodeLink *link : connecting_) {
                link->deadline_us_ = std::max(now + config_.connect_timeout_us, link->outage_until_us_);
                link->retry_us_ = config_.first_retry_us;
                link->next_retry_us_ = now;  // a CONNECT now: the ones sent while the port was down were lost
            }
            for (CloseNotice &n : notices_) {
                n.deadline_us = now + config_.connect_timeout_us;
                n.retry_us = config_.first_retry_us;
                n.next_retry_us = now;
            }
            for (NodeLink *link : probing_) {  // the port was down: probe soon, and slowly again only if unanswered
                link->probe_retry_us_ = config_.first_probe_us;
                link->next_probe_us_ = now + link->probe_retry_us_;
            }
            try {
                reopen = connected_;
            } catch (...) {  // out of memory: those links stay stopped and their sends wait (a later resume)
                held_ = true;
            }
        }
    }
    // Outside the manager's mutex: opening posts what queued, and a post that fails completes its send upward.
    for (NodeLink *link : reopen)
        if (!link->queue_.broken()) link->queue_.open(link->ini_.get(), link->tgt_qpn_);
    host_.timers_changed();
    host_.unlock_queues();
}

void ConnectionManager::abandon(ibv_wc_status status) noexcept {
    host_.lock_queues();
    std::vector<NodeLink *> links;
    {
        Guard g(*this);
        if (abandoned_) {
            host_.unlock_queues();
            return;
        }
        abandoned_ = true;
        held_ = true;  // nothing is posted or reopened
        try {
            links.reserve(links_.size());
            for (const auto &[port, link] : links_) links.push_back(link.get());
        } catch (...) {  // out of memory: the queues fail through their own completions instead
        }
        // Nothing left to wait for through the rail: connections being made, drained or waiting for room end
        // here (failed, quietly: the owner gave the rail up and moves their traffic), CLOSE, LEAVING and ADDRESS
        // are no longer retransmitted. Their deadlines would never have expired: held_ stops them.
        for (const auto &[port, link] : links_) {
            link->state_ = NodeLink::State::failed;
            link->opening_ = false;
            link->start_pending_ = false;
        }
        connecting_.clear();
        connected_.clear();
        draining_.clear();
        waiting_.clear();
        to_start_.clear();
        leaving_.clear();
        notices_.clear();
        address_notices_.clear();
        for (auto &[k, t] : owned_) t.leaving = false;
        awaiting_leaving_ack_ = 0;
    }
    // Outside the manager's mutex: failing a queue completes its operations upward, which may send elsewhere.
    for (NodeLink *link : links) {
        if (link->ini_) host_.fail_qp(link->ini_.get());
        link->queue_.fail(status);
    }
    host_.unlock_queues();
}

const NodeLink *ConnectionManager::link_of(const SendQueue &queue) const noexcept {
    std::lock_guard<std::mutex> g(mutex_);
    return link_with_queue_locked(queue);
}

bool ConnectionManager::is_fence(const SendOp *op) const noexcept {
    std::lock_guard<std::mutex> g(mutex_);
    for (const auto &[node, link] : links_)
        if (&link->fence_ == op) return true;
    return false;
}

QpRole ConnectionManager::role_of(std::uint32_t qp_num) const noexcept {
    std::lock_guard<std::mutex> g(mutex_);
    QpRole role;
    if (qp_num == 0) return role;
    for (const auto &[port, link] : links_) {
        if (link->ini_qpn() != qp_num) continue;
        role.kind = QpRole::Kind::ini;
        role.node = link->node_;
        role.rank = link->owner_;
        role.peer_qpn = link->tgt_qpn_;
        role.generation = link->generation_;
        role.closing = link->state_ == NodeLink::State::draining || link->state_ == NodeLink::State::failed;
        return role;
    }
    if (auto it = owned_qpns_.find(qp_num); it != owned_qpns_.end()) {
        for (const auto &[k, t] : owned_) {
            if (t.tgt.get()->qp_num != qp_num) continue;
            role.kind = QpRole::Kind::tgt_owned;
            role.rank = t.sender;
            role.peer_qpn = t.ini_qpn;
            role.generation = t.generation;
            if (const PortAddress *from = host_.address_of(t.sender); from != nullptr) role.node = from->node_id;
            return role;
        }
    }
    if (auto it = opened_.find(qp_num); it != opened_.end()) {
        role.kind = QpRole::Kind::tgt_handle;
        role.peer_qpn = it->second.ini_qpn;
    }
    return role;
}

void ConnectionManager::count_foreign(const std::string &why) noexcept {
    Guard g(*this);
    ++counters_->cm_datagrams_received;
    ++counters_->cm_rejected;
    host_.note(why);
}

void ConnectionManager::drop_handle(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept {
    Guard g(*this);
    if (auto it = opened_.find(tgt_qpn); it != opened_.end() && it->second.ini_qpn == ini_qpn) release_opened(it);
}

void ConnectionManager::hold_tgt(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept {
    Guard g(*this);
    if (owned_qpns_.count(tgt_qpn) != 0) return;  // our own: we hold it already
    if (auto it = opened_.find(tgt_qpn); it != opened_.end()) {
        if (it->second.ini_qpn == ini_qpn) return;
        release_opened(it);  // a handle on a QP number that has been reused since
    }
    const auto handle = host_.open_tgt(tgt_qpn, ini_qpn);
    if (!handle) {
        // Closed already (its CLOSE overtook our poll), or never ours: nothing to hold.
        host_.note("no handle on TGT QP " + std::to_string(tgt_qpn) + ": " + handle.error().message());
        return;
    }
    opened_.emplace(tgt_qpn, OpenedTgt{ini_qpn, HostQp(&host_, *handle)});
    ++counters_->tgt_handles;
    count_connection_opened(*counters_);
}

}  // namespace xrc
