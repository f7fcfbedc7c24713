// SPDX-License-Identifier: BSD-3-Clause
#include "port_transport.h"

#include <fcntl.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace xrc {
namespace {

// Set while a thread serves the connection manager: what it tells the listener waits for tick().
thread_local bool serving = false;

struct Serving {
    Serving() noexcept { serving = true; }
    ~Serving() { serving = false; }
    Serving(const Serving &) = delete;
    Serving &operator=(const Serving &) = delete;
};

int modify(ibv_qp *qp, const QpTransition &t) noexcept {
    auto attr = t.attr;  // ibv_modify_qp takes a non-const attr
    return ibv_modify_qp(qp, &attr, t.mask);
}

ibv_gid gid_of(const PortAddress &a) {
    ibv_gid gid{};
    std::memcpy(gid.raw, a.gid, sizeof(gid.raw));
    return gid;
}

// A random, nonzero token: the proof, in every connection request, that the sender read our modex address.
std::uint64_t new_token() noexcept {
    std::uint64_t token = 0;
    while (token == 0) {
        if (getrandom(&token, sizeof(token), 0) != static_cast<ssize_t>(sizeof(token))) {
            timespec ts{};
            clock_gettime(CLOCK_REALTIME, &ts);
            token = (std::uint64_t(ts.tv_nsec) << 32) ^ std::uint64_t(ts.tv_sec) ^ (std::uint64_t(getpid()) << 16);
        }
    }
    return token;
}

}  // namespace

std::uint32_t send_queue_depth(const TransportConfig &config, int max_qp_wr) noexcept {
    int depth = std::min(config.send_queue_depth, max_qp_wr);
    if (config.keep_inline_copies && config.max_inline != 0) depth = std::min(depth, kKeptCopiesDepth);
    return static_cast<std::uint32_t>(std::max(depth, 1));
}

Result<std::unique_ptr<PortTransport>> PortTransport::make(std::shared_ptr<OpenedDevice> device, const UsablePort &port,
                                                           const TransportConfig &config, AddressLookup lookup,
                                                           Listener listener) {
    std::unique_ptr<PortTransport> transport(
        new PortTransport(std::move(device), port, config, std::move(lookup), std::move(listener)));
    if (auto opened = transport->open(config); !opened) return std::move(opened).error();
    return transport;
}

PortTransport::PortTransport(std::shared_ptr<OpenedDevice> device, const UsablePort &port,
                             const TransportConfig &config, AddressLookup lookup, Listener listener)
    : device_(std::move(device)),
      port_(port),
      lookup_(std::move(lookup)),
      listener_(std::move(listener)),
      path_(config.path),
      health_(config.port_down_grace_us, config.cm.outage_limit_us) {
    path_.port_num = port_.port;
    const ibv_mtu wanted = config.mtu_bytes != 0 ? mtu_from_bytes(config.mtu_bytes) : port_.port_attr.active_mtu;
    path_.mtu = std::min(wanted, port_.port_attr.active_mtu);
    path_.max_rd_atomic = static_cast<std::uint8_t>(std::min<int>(
        path_.max_rd_atomic,
        std::max(1, std::min(device_->device_attr.max_qp_rd_atom, device_->device_attr.max_qp_init_rd_atom))));
    poll_batch_ = static_cast<std::uint32_t>(config.poll_batch);
    depth_ = send_queue_depth(config, device_->device_attr.max_qp_wr);
    signal_interval_ = std::min(static_cast<std::uint32_t>(config.signal_interval), depth_);
    inline_wanted_ = config.max_inline < 0 ? 256u : static_cast<std::uint32_t>(config.max_inline);
    max_inline_.store(inline_wanted_, std::memory_order_relaxed);
    loopback_queue_ = std::make_unique<SendQueue>(depth_, signal_interval_, config.cm.my_node,
                                                  &PortTransport::loopback_blocked, this);
    // Every queue of a transport that keeps copies of its inline sends (its links', to send them again after a
    // refusal or hand them back after a timeout) keeps them in its loopback queue too, where sendi assembles them,
    // so that the sender needs no test per message.
    if (config.keep_inline_copies && inline_wanted_ > 0) loopback_queue_->keep_copies(inline_wanted_);
    // Riding outages (btl_xrc_outage_limit), on-node traffic through the HCA's loopback waits for the port as the
    // links do: what was not acknowledged goes out again over a new pair, numbered, and the receivers drop what they
    // had.
    if (config.cm.outage_limit_us != 0) loopback_queue_->ride_outages();
}

Result<void> PortTransport::open(const TransportConfig &config) {
    ibv_context *ctx = device_->context.get();

    pd_.reset(ibv_alloc_pd(ctx));
    if (!pd_) {
        return Error::from_errno("ibv_alloc_pd");
    }
    // One CQ takes every receive completion (at most the posted SRQ buffers), the UD channel's, and every send
    // completion (at most a full send queue per INI QP). It starts with room for the links expected at once and
    // grows as more are made (reserve_completions), so a process that talks to few nodes never pins a CQ for N.
    std::size_t receive_entries = 0;
    for (const auto &cls : config.receive_classes) receive_entries += cls.count;
    fixed_cqes_ = receive_entries + config.cm_receives + 64;
    const std::size_t max_cqe = static_cast<std::size_t>(device_->device_attr.max_cqe);
    if (fixed_cqes_ + 2 * std::size_t(depth_) > max_cqe) {
        return Error(ErrorKind::resource,
                     "the device's completion queues (" + std::to_string(max_cqe) + " entries) cannot hold " +
                         std::to_string(receive_entries) + " receive buffers plus two send queues of " +
                         std::to_string(depth_) +
                         ": lower the counts in btl_xrc_receive_queues or btl_xrc_send_queue_depth");
    }
    const std::size_t want = fixed_cqes_ + std::size_t(depth_) * (1 + config.expected_links);
    cqe_ = static_cast<int>(std::min(max_cqe, std::max<std::size_t>(config.cq_size, want)));
    cq_.reset(ibv_create_cq(ctx, cqe_, nullptr, nullptr, 0));
    if (!cq_) {
        return Error::from_errno("ibv_create_cq").wrap("", " (" + std::to_string(cqe_) + " entries)");
    }
    cqe_ = cq_->cqe;
    auto domain = XrcDomain::open(ctx, config.xrcd_dir, config.job_name, device_->name, port_.port, config.local_ranks);
    if (!domain) return std::move(domain).error();
    domain_ = std::move(*domain);
    for (const auto &cls : config.receive_classes) {
        auto pool = RecvPool::make(ctx, pd_.get(), cq_.get(), domain_->get(),
                                   static_cast<std::uint32_t>(cls.buffer_size), cls.count, cls.low_watermark);
        if (!pool) return std::move(pool).error();
        pools_.push_back(std::move(*pool));
    }

    ibv_gid gid{};
    if (ibv_query_gid(ctx, port_.port, path_.gid_index, &gid) != 0) {
        return Error(ErrorKind::system, "ibv_query_gid(index " + std::to_string(path_.gid_index) + ") failed");
    }
    address_.lid = port_.port_attr.lid;
    address_.port_num = port_.port;
    address_.mtu = static_cast<std::uint8_t>(path_.mtu);
    std::memcpy(address_.gid, gid.raw, sizeof(address_.gid));
    address_.node_id = config.cm.my_node;
    address_.token = new_token();
    for (const auto &pool : pools_) address_.srqs.push_back({pool->buffer_size(), pool->srq_num()});

    ibv_cq *ud_cq = cq_.get();
    if (config.served) {
        // The UD QP's own CQ, whose channel the service thread sleeps on: the data CQ is never armed, and what
        // progress polls carries no connection manager traffic.
        cm_channel_.reset(ibv_create_comp_channel(ctx));
        if (!cm_channel_) {
            return Error::from_errno("ibv_create_comp_channel");
        }
        const int flags = fcntl(cm_channel_->fd, F_GETFL);
        if (flags < 0 || fcntl(cm_channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
            return Error::from_errno("making the completion channel non-blocking");
        }
        const int entries = static_cast<int>(config.cm_receives + 64 + 16);
        cm_cq_.reset(ibv_create_cq(ctx, entries, nullptr, cm_channel_.get(), 0));
        if (!cm_cq_ || ibv_req_notify_cq(cm_cq_.get(), 0) != 0) {
            return Error::from_errno("creating the connection manager's completion queue")
                .wrap("", " (" + std::to_string(entries) + " entries)");
        }
        ud_cq = cm_cq_.get();
    }
    auto ud = UdChannel::make(pd_.get(), ud_cq, path_, cm_qkey(address_.token), config.cm_receives);
    if (!ud) return std::move(ud).error();
    ud_ = std::move(*ud);
    address_.cm_qpn = ud_->qpn();

    CmConfig cm = config.cm;
    cm.my_token = address_.token;
    cm.my_port = port_identity(address_);
    cm.queue_depth = depth_;
    cm.signal_interval = signal_interval_;
    // The inline sends a link's queue keeps copies of are at most this large (max_inline() only ever goes down from
    // it).
    cm.kept_copy_bytes = loopback_queue_->keeps_copies() ? inline_wanted_ : 0;
    cm.retry_budget_us = retry_budget_us(path_.timeout, path_.retry_count);
    CmHost &host = *this;  // (a private base: converted here, where it is accessible)
    cm_ = std::make_unique<ConnectionManager>(host, cm);
    others_ = std::make_unique<JobManagers>(*cm_);
    return {};
}

// The host of another job's manager: the port's verbs and UD channel, with that job's addresses.
class PortTransport::OtherJobHost final : public CmHost {
public:
    OtherJobHost(PortTransport &t, AddressLookup lookup) : t_(t), lookup_(std::move(lookup)) {}
    ~OtherJobHost() override { t_.other_links_.fetch_sub(links_, std::memory_order_relaxed); }
    const PortAddress *address_of(std::uint32_t rank) noexcept override { return lookup_(rank); }
    void send_datagram(const PortAddress &to, const CmBytes &bytes) noexcept override { t_.send_datagram(to, bytes); }
    Result<ibv_qp *> create_ini() noexcept override { return t_.create_ini(); }
    Result<void> connect_ini(ibv_qp *ini, const PortAddress &target, std::uint32_t tgt_qpn) noexcept override {
        return t_.connect_ini(ini, target, tgt_qpn);
    }
    Result<ibv_qp *> create_tgt(const PortAddress &initiator, std::uint32_t ini_qpn) noexcept override {
        return t_.create_tgt(initiator, ini_qpn);
    }
    Result<ibv_qp *> open_tgt(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept override {
        return t_.open_tgt(tgt_qpn, ini_qpn);
    }
    void destroy_qp(ibv_qp *qp) noexcept override { t_.destroy_qp(qp); }
    // Another job's LID changes are not followed (that job's addresses are looked up anew by its lookup).
    void address_moved(std::uint64_t, std::uint16_t, std::uint16_t) noexcept override {}
    Result<bool> migrate_path(ibv_qp *qp, std::uint16_t old_lid, std::uint16_t new_lid) noexcept override {
        return t_.migrate_path(qp, old_lid, new_lid);
    }
    void fail_qp(ibv_qp *qp) noexcept override { t_.fail_qp(qp); }
    bool reserve_completions(std::size_t links) noexcept override {
        const std::size_t before = links_;
        t_.other_links_.fetch_add(links - before, std::memory_order_relaxed);
        links_ = links;
        if (t_.grow_completions(t_.home_links_.load(std::memory_order_relaxed) +
                                t_.other_links_.load(std::memory_order_relaxed)))
            return true;
        t_.other_links_.fetch_sub(links - before, std::memory_order_relaxed);
        links_ = before;
        return false;
    }
    std::uint64_t now_us() noexcept override { return t_.now_us(); }
    void link_failed(const NodeLink &link, const std::string &why) noexcept override { t_.link_failed(link, why); }
    void link_revived(const NodeLink &link) noexcept override { t_.link_revived(link); }
    void note(const std::string &what) noexcept override { t_.note(what); }
    void timers_changed() noexcept override { t_.timers_changed(); }
    void lock_queues() noexcept override { t_.lock_queues(); }
    void unlock_queues() noexcept override { t_.unlock_queues(); }

private:
    PortTransport &t_;
    AddressLookup lookup_;
    std::size_t links_ = 0;  // what this manager reserved, in other_links_
};

void PortTransport::source_closed(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept {
    {
        std::lock_guard<std::mutex> guard(notes_mutex_);
        try {
            closed_sources_.push_back(source_key(tgt_qpn, ini_qpn));
        } catch (...) {  // out of memory: that connection's count stays (one entry, never wrong)
            return;
        }
    }
    raise();
}

void PortTransport::take_closed_sources(std::vector<SourceKey> &out) noexcept {
    out.clear();
    std::lock_guard<std::mutex> guard(notes_mutex_);
    out.swap(closed_sources_);
}

void PortTransport::attach_other(std::uint32_t jobid, Peer &peer, const PortAddress &address, std::uint32_t owner,
                                 AddressLookup lookup) {
    ConnectionManager *cm = others_->find(jobid);
    if (cm == nullptr) {
        CmConfig config = cm_->config();
        cm = &others_->meet(jobid, std::make_unique<OtherJobHost>(*this, std::move(lookup)), config);
        cm->count_into(counters_);  // the module's counters: totals over every job
        if (finalizing_) cm->begin_finalize();
        changed();
    }
    peer.srqs = address.srqs;
    cm->attach(peer, cm->link_for(address, owner));
}

void PortTransport::detach_other(std::uint32_t jobid, Peer &peer) noexcept {
    if (ConnectionManager *cm = others_->find(jobid); cm != nullptr) cm->detach(peer);
}

void PortTransport::hold_tgt(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept {
    // A TGT QP that a manager of another job made here is held by its maker already.
    bool own = false;
    others_->for_each([&](std::uint32_t, const ConnectionManager &cm, bool) { own = own || cm.owns_tgt(tgt_qpn); });
    if (!own) cm_->hold_tgt(tgt_qpn, ini_qpn);
}

bool PortTransport::finished() const noexcept {
    bool all = cm_->finished() && loopback_queue_->idle();
    others_->for_each([&](std::uint32_t, const ConnectionManager &cm, bool) { all = all && cm.finished(); });
    return all;
}

bool PortTransport::own_work_finished() const noexcept {
    bool all = cm_->own_work_finished() && loopback_queue_->idle();
    others_->for_each([&](std::uint32_t, const ConnectionManager &cm, bool) { all = all && cm.own_work_finished(); });
    return all;
}

std::string PortTransport::joined_over_jobs(std::string (ConnectionManager::*of)() noexcept) noexcept {
    std::string all = ((*cm_).*of)();
    const std::string others = others_->joined(of);
    if (!others.empty()) all += (all.empty() ? "" : "; ") + others;
    return all;
}

std::string PortTransport::leave_initiators() noexcept {
    return joined_over_jobs(&ConnectionManager::leave_initiators);
}

std::string PortTransport::drop_initiators() noexcept {
    return joined_over_jobs(&ConnectionManager::drop_initiators);
}

std::string PortTransport::leave_other_jobs() noexcept {
    return others_->leave_initiators();
}

PortTransport::~PortTransport() {
    if (loopback_ini_) count_connections_closed(*counters_, 1);
    // QPs first (they reference the SRQs' XRCD and the CQ), then the UD channel, SRQs, the domain, the CQ, the PD.
    // Other jobs' managers before ours, which holds the handles they release.
    others_.reset();
    cm_.reset();
    loopback_tgt_.reset();
    loopback_ini_.reset();
    ud_.reset();
    cm_cq_.reset();  // every event was acknowledged as it was read (serve_cm)
    cm_channel_.reset();
    pools_.clear();
    domain_.reset();
    cq_.reset();
    pd_.reset();
}

void PortTransport::describe(StatusPort &out) const {
    out.device = device_->name;
    out.port = port_.port;
    out.lid = address_.lid;
    out.xrcd_file = domain_->path();
    out.xrcd_dev = domain_->file_dev();
    out.xrcd_ino = domain_->file_ino();
    out.cm_qpn = address_.cm_qpn;
    for (const auto &pool : pools_)
        out.srqs.push_back(
            {pool->buffer_size(), pool->srq_num(), pool->count(), pool->posted(), pool->low_watermark()});
    // The QP state each connection's INI QP was driven to: INIT until the target accepted, then RTS.
    auto qp_state = [](bool has_qp, bool ready, const SendQueue &queue) -> std::string {
        if (!has_qp) return {};
        if (queue.broken()) return "ERR";
        return ready ? "RTS" : "INIT";
    };
    std::uint32_t job = cm_->config().jobid;  // whose processes the links below reach
    const auto describe_link = [&](const NodeLink &link) {
        StatusLink l;
        l.job = job;
        l.node = link.node();
        l.state = link_state_name(link.state());
        l.ini_qpn = link.ini_qpn();
        l.qp_state = qp_state(l.ini_qpn != 0, link.tgt_qpn() != 0, link.queue());
        l.owner = link.owner();
        l.tgt_qpn = link.tgt_qpn();
        l.generation = link.generation();
        l.outstanding = link.queue().outstanding();
        l.queued = link.queue().has_pending();
        out.links.push_back(std::move(l));
    };
    cm_->for_each_link(describe_link);
    // Other jobs' connections and the TGT QPs made for their senders (ranks of their job: node unknown here).
    others_->for_each([&](std::uint32_t other, const ConnectionManager &cm, bool) {
        job = other;
        cm.for_each_link(describe_link);
        cm.for_each_owned(
            [&](std::uint32_t sender, std::uint32_t generation, std::uint32_t ini_qpn, std::uint32_t tgt_qpn) {
                out.tgts.push_back({tgt_qpn, "RTS", sender, 0, {}, ini_qpn, generation, other, false});
            });
    });
    cm_->for_each_owned(
        [&](std::uint32_t sender, std::uint32_t generation, std::uint32_t ini_qpn, std::uint32_t tgt_qpn) {
            const PortAddress *from = lookup_(sender);
            out.tgts.push_back({tgt_qpn,
                                "RTS",
                                sender,
                                from != nullptr ? from->node_id : 0,
                                {},
                                ini_qpn,
                                generation,
                                cm_->config().jobid,
                                false});
        });
    cm_->for_each_opened([&](std::uint32_t tgt_qpn, std::uint32_t ini_qpn) {
        out.handles.push_back({tgt_qpn, ini_qpn});
    });
    if (loopback_ini_ && loopback_tgt_) {
        const std::uint32_t me = cm_->config().my_rank;
        StatusLink l;
        l.node = address_.node_id;
        l.state = "loopback";
        l.job = cm_->config().jobid;
        l.ini_qpn = loopback_ini_->qp_num;
        l.qp_state = qp_state(true, true, *loopback_queue_);
        l.owner = me;
        l.tgt_qpn = loopback_tgt_->qp_num;
        l.outstanding = loopback_queue_->outstanding();
        l.queued = loopback_queue_->has_pending();
        out.links.push_back(std::move(l));
        out.tgts.push_back({loopback_tgt_->qp_num,
                            "RTS",
                            me,
                            address_.node_id,
                            {},
                            loopback_ini_->qp_num,
                            0,
                            cm_->config().jobid,
                            true});
    }
}

TransportCounts PortTransport::counts() const noexcept {
    TransportCounts c;
    c.ini_qps = (cm_ ? cm_->live_ini_qps() : 0) + (loopback_ini_ != nullptr);
    c.tgt_qps_owned = (cm_ ? cm_->owned_tgts() : 0) + (loopback_tgt_ != nullptr);
    c.tgt_handles = cm_ ? cm_->held_handles() : 0;
    if (others_)
        others_->for_each([&](std::uint32_t, const ConnectionManager &cm, bool) {
            c.ini_qps += cm.live_ini_qps();
            c.tgt_qps_owned += cm.owned_tgts();
        });
    c.srqs = pools_.size();
    for (const auto &p : pools_) c.receive_bytes += p->registered_bytes();
    return c;
}

void PortTransport::count_into(Counters *counters) noexcept {
    counters_ = counters != nullptr ? counters : &uncounted_;
    if (cm_) cm_->count_into(counters_);
    if (others_) others_->for_each([&](std::uint32_t, ConnectionManager &cm, bool) { cm.count_into(counters_); });
}

void PortTransport::attach(Peer &peer, const PortAddress &address, std::uint32_t owner) {
    peer.srqs = address.srqs;
    // Through the loopback only when the peer is on this very HCA port: the launcher's node id may be a hash or
    // wrong, and a peer on another node taken for a local one would get our node's SRQ with its number.
    if (port_identity(address) == port_identity(address_)) {
        lock_queues();
        try {
            loopback_peers_.push_back(&peer);
        } catch (...) {
            unlock_queues();
            throw;
        }
        peer.queue = loopback_queue_.get();
        peer.link = nullptr;
        peer.imm_flags = loopback_left_ ? kImmFirst : 0;
        unlock_queues();
        return;
    }
    cm_->attach(peer, cm_->link_for(address, owner));
}

void PortTransport::detach(Peer &peer) noexcept {
    if (peer.queue == loopback_queue_.get()) {
        lock_queues();
        std::erase(loopback_peers_, &peer);
        unlock_queues();
        return;
    }
    cm_->detach(peer);
}

void PortTransport::connect_node(const PortAddress &target, std::uint32_t owner) {
    if (port_identity(target) == port_identity(address_)) return;
    cm_->connect(cm_->link_for(target, owner));
}

void PortTransport::on_cm_completion(const ibv_wc &wc) noexcept {
    ud_->complete(wc, [this](std::span<const std::uint8_t> bytes, std::uint16_t slid, std::uint32_t src_qp) {
        others_->on_datagram(bytes, slid, src_qp);
    });
}

void PortTransport::serve_cm() noexcept {
    const Serving mark;
    ibv_cq *cq = nullptr;
    void *context = nullptr;
    unsigned events = 0;
    while (ibv_get_cq_event(cm_channel_.get(), &cq, &context) == 0) ++events;
    if (events > 0) ibv_ack_cq_events(cm_cq_.get(), events);
    // Armed before the queue is emptied: a completion that arrives after the last poll raises the next event.
    (void)ibv_req_notify_cq(cm_cq_.get(), 0);
    ibv_wc wcs[16];
    int n = 0;
    while ((n = ibv_poll_cq(cm_cq_.get(), 16, wcs)) > 0)
        for (int i = 0; i < n; ++i) on_cm_completion(wcs[i]);
}

std::uint64_t PortTransport::serve_timers() noexcept {
    const Serving mark;
    return std::min(cm_->tick_timers(), others_->tick_timers());
}

void PortTransport::changed() noexcept {
    if (serving) {
        changed_due_.store(true, std::memory_order_relaxed);
        raise();
        return;
    }
    if (listener_.changed) listener_.changed();
}

void PortTransport::flush_serving_notes() noexcept {
    if (changed_due_.exchange(false, std::memory_order_relaxed) && listener_.changed) listener_.changed();
    std::vector<std::string> notes;
    {
        std::lock_guard<std::mutex> g(notes_mutex_);
        notes.swap(notes_);
    }
    if (listener_.note)
        for (const auto &n : notes) listener_.note(n);
}

void PortTransport::tick() noexcept {
    if (take_raised()) flush_serving_notes();
    if (loopback_wanted_.exchange(false)) open_loopback();
    // Taken and cleared in one step: of the threads that tick at once, one reports it.
    bool failed = false;
    std::string why;
    {
        std::lock_guard<std::mutex> g(loopback_mutex_);
        if (loopback_failed_) {
            failed = true;
            loopback_failed_ = false;
            why.swap(loopback_error_);
        }
    }
    if (failed) {
        lock_queues();
        loopback_queue_->fail(IBV_WC_GENERAL_ERR);
        unlock_queues();
        if (listener_.link_failed) listener_.link_failed(nullptr, "cannot set up on-node XRC QPs: " + why);
    }
    cm_->tick();
    if (others_->busy()) others_->tick(now_us());
}

bool PortTransport::all_reported() const noexcept {
    bool all = loopback_queue_->outstanding_callbacks() == 0 && !loopback_queue_->has_pending();
    const auto link_reported = [&](const NodeLink &link) {
        all = all && (link.node_dead() || (link.queue().outstanding_callbacks() == 0 && !link.queue().has_pending()));
    };
    cm_->for_each_link(link_reported);
    others_->for_each([&](std::uint32_t, const ConnectionManager &cm, bool) { cm.for_each_link(link_reported); });
    return all;
}

bool PortTransport::any_broken() const noexcept {
    bool broken = loopback_queue_->broken();
    const auto link_broken = [&](const NodeLink &link) {
        broken = broken || (link.queue().broken() && !link.node_dead());
    };
    cm_->for_each_link(link_broken);
    others_->for_each([&](std::uint32_t, const ConnectionManager &cm, bool) { cm.for_each_link(link_broken); });
    return broken;
}

// Any progressing thread may act on the port's events at once: the queues' lock (recursive; the managers' hold and
// resume take it again) makes each transition one step, so that the port's health, the managers' holds and the
// loopback queue always change in the same order, and only the thread that saw the change acts on it.
bool PortTransport::port_down() noexcept {
    lock_queues();
    const bool was_up = health_.on_down(now_us());
    if (was_up) {
        ++counters_->port_downs;
        cm_->hold();
        others_->for_each([](std::uint32_t, ConnectionManager &cm, bool) { cm.hold(); });
        loopback_queue_->stop();
    }
    unlock_queues();
    if (was_up) changed();
    return was_up;
}

bool PortTransport::port_up() noexcept {
    lock_queues();
    const std::uint64_t now = now_us();
    std::uint64_t since = now;
    const bool was_down = health_.on_up(now, &since);
    if (was_down) {
        ++counters_->port_ups;
        counters_->port_down_ms += (now - since) / 1000;
        cm_->resume();
        others_->for_each([](std::uint32_t, ConnectionManager &cm, bool) { cm.resume(); });
        if (loopback_ini_ && !finalizing_ && !cm_->abandoned())
            loopback_queue_->open(loopback_ini_.get(), loopback_tgt_->qp_num);
    }
    unlock_queues();
    if (was_down) changed();
    return was_down;
}

void PortTransport::fail_qp(ibv_qp *qp) noexcept {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    (void)ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}

void PortTransport::abandon() noexcept {
    cm_->abandon(IBV_WC_WR_FLUSH_ERR);
    others_->for_each([](std::uint32_t, ConnectionManager &cm, bool) { cm.abandon(IBV_WC_WR_FLUSH_ERR); });
    lock_queues();
    if (loopback_ini_) fail_qp(loopback_ini_.get());
    loopback_queue_->fail(IBV_WC_WR_FLUSH_ERR);
    unlock_queues();
    changed();
}

bool PortTransport::revive() noexcept {
    const bool revived = cm_->revive();
    others_->for_each([](std::uint32_t, ConnectionManager &cm, bool) { (void)cm.revive(); });
    if (!revived) return false;
    // The on-node pair failed with the rail (abandon): it goes, its queue is closed again, and the next on-node send
    // makes a new pair (loopback_blocked), as the first one did.
    lock_queues();
    loopback_queue_->reset();
    if (loopback_ini_) count_connections_closed(*counters_, 1);
    loopback_left_ = false;
    loopback_ini_.reset();
    loopback_tgt_.reset();
    unlock_queues();
    changed();
    return true;
}

const char *PortTransport::own_operation(const SendOp *op) const noexcept {
    if (op == &loopback_fence_) return "the on-node loopback queue's drain fence";
    if (cm_->is_fence(op)) return "a connection's drain fence (eviction or finalize)";
    bool fence = false;
    others_->for_each([&](std::uint32_t, const ConnectionManager &cm, bool) { fence = fence || cm.is_fence(op); });
    if (fence) return "a connection's drain fence toward another job (its processes left, or finalize)";
    return nullptr;
}

QpRole PortTransport::role_of(std::uint32_t qp_num) const noexcept {
    QpRole role = cm_->role_of(qp_num);
    if (role.kind == QpRole::Kind::unknown && qp_num != 0)
        others_->for_each([&](std::uint32_t, const ConnectionManager &cm, bool) {
            if (role.kind == QpRole::Kind::unknown) role = cm.role_of(qp_num);
        });
    if (role.kind != QpRole::Kind::unknown || qp_num == 0) return role;
    const std::uint32_t me = cm_->config().my_rank;
    if (loopback_ini_ && loopback_ini_->qp_num == qp_num) {
        role.kind = QpRole::Kind::loopback_ini;
        role.rank = me;
        role.node = address_.node_id;
        role.peer_qpn = loopback_tgt_ ? loopback_tgt_->qp_num : 0;
        role.closing = finalizing_;
    } else if (loopback_tgt_ && loopback_tgt_->qp_num == qp_num) {
        role.kind = QpRole::Kind::loopback_tgt;
        role.rank = me;
        role.node = address_.node_id;
        role.peer_qpn = loopback_ini_ ? loopback_ini_->qp_num : 0;
        role.closing = finalizing_;
    } else if (address_.cm_qpn == qp_num) {
        role.kind = QpRole::Kind::cm_ud;
    }
    return role;
}

void PortTransport::begin_finalize() noexcept {
    finalizing_ = true;
    changed();
    cm_->begin_finalize();
    others_->for_each([](std::uint32_t, ConnectionManager &cm, bool) { cm.begin_finalize(); });
    loopback_queue_->stop();
    if (loopback_queue_->needs_fence() && !address_.srqs.empty()) {
        make_fence(loopback_fence_, address_.srqs.front().srq_num, [](SendOp *, ibv_wc_status) noexcept {});
        (void)loopback_queue_->post_fence(loopback_fence_);
    }
}

// ------------------------------------------------------------------------------------------------------ CmHost

void PortTransport::send_datagram(const PortAddress &to, const CmBytes &bytes) noexcept {
    (void)ud_->send(to, bytes, remote_subnet(to));
}

Result<bool> PortTransport::migrate_path(ibv_qp *qp, std::uint16_t old_lid, std::uint16_t new_lid) noexcept {
    ibv_qp_attr current{};
    ibv_qp_init_attr init{};
    if (ibv_query_qp(qp, &current, kMigrationQueryMask, &init) != 0) return Error::from_errno("querying its path");
    if (current.qp_state != IBV_QPS_RTS || current.ah_attr.dlid != old_lid) return false;
    if (modify(qp, load_alternate_path(current, new_lid)) != 0)
        return Error::from_errno("loading the alternate path (RTS->RTS, REARM)");
    if (modify(qp, migrate_to_alternate_path()) != 0)
        return Error::from_errno("migrating to the alternate path (RTS->RTS, MIGRATED)");
    return true;
}

bool PortTransport::lid_changed(std::uint16_t new_lid) noexcept {
    const std::uint16_t old_lid = address_.lid;
    if (new_lid == 0 || new_lid == old_lid) return false;
    address_.lid = new_lid;
    // The loopback pair's path goes to this port's own LID. Our other QPs need nothing: the HCA sends from the
    // port's LID of the moment, and their destinations did not move.
    for (ibv_qp *qp : {loopback_ini_.get(), loopback_tgt_.get()}) {
        if (qp == nullptr) continue;
        const auto moved = migrate_path(qp, old_lid, new_lid);
        if (!moved)
            note("cannot move loopback QP " + std::to_string(qp->qp_num) + " to LID " + std::to_string(new_lid) + ": " +
                 moved.error().message());
        else if (*moved)
            ++counters_->paths_migrated;
    }
    cm_->announce_lid(old_lid, new_lid);
    return true;
}

Result<ibv_qp *> PortTransport::create_ini() noexcept {
    ibv_qp_init_attr_ex attr{};
    attr.qp_type = IBV_QPT_XRC_SEND;
    attr.send_cq = cq_.get();
    attr.recv_cq = cq_.get();
    attr.cap.max_send_wr = depth_;
    attr.cap.max_send_sge = 1;
    attr.cap.max_inline_data = inline_wanted_;
    attr.comp_mask = IBV_QP_INIT_ATTR_PD;
    attr.pd = pd_.get();
    QpPtr qp(ibv_create_qp_ex(context(), &attr));
    if (!qp && inline_wanted_ > 0) {  // the device may not inline that much: ask for what it allows
        attr.cap.max_inline_data = 0;
        qp.reset(ibv_create_qp_ex(context(), &attr));
    }
    if (!qp) return Error::from_errno("creating an XRC send (INI) QP");
    // Every INI QP must take what the fast path inlines: keep the smallest the device granted.
    max_inline_.store(
        std::min(max_inline_.load(std::memory_order_relaxed), inline_wanted_ == 0 ? 0u : attr.cap.max_inline_data),
        std::memory_order_relaxed);
    if (modify(qp.get(), ini_to_init(path_)) != 0) return Error::from_errno("XRC send QP RESET->INIT");
    changed();
    return qp.release();
}

Result<void> PortTransport::connect_ini(ibv_qp *ini, const PortAddress &target, std::uint32_t tgt_qpn) noexcept {
    const PathSettings path = path_toward(target);
    const RemoteQp remote{target.lid, gid_of(target), tgt_qpn, initial_psn(tgt_qpn)};
    if (modify(ini, ini_to_rtr(path, remote)) != 0) return Error::from_errno("XRC send QP INIT->RTR");
    if (modify(ini, ini_to_rts(path, initial_psn(ini->qp_num))) != 0) return Error::from_errno("XRC send QP RTR->RTS");
    changed();
    return {};
}

Result<ibv_qp *> PortTransport::create_tgt(const PortAddress &initiator, std::uint32_t ini_qpn) noexcept {
    ibv_qp_init_attr_ex attr{};
    attr.qp_type = IBV_QPT_XRC_RECV;
    attr.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    attr.xrcd = domain_->get();
    QpPtr qp(ibv_create_qp_ex(context(), &attr));
    if (!qp) return Error::from_errno("creating an XRC receive (TGT) QP");
    const PathSettings path = path_toward(initiator);
    const RemoteQp ini{initiator.lid, gid_of(initiator), ini_qpn, initial_psn(ini_qpn)};
    if (modify(qp.get(), tgt_to_init(path_)) != 0 || modify(qp.get(), tgt_to_rtr(path, ini)) != 0 ||
        modify(qp.get(), tgt_to_rts(path, initial_psn(qp->qp_num))) != 0)
        return Error::from_errno("readying an XRC TGT QP");
    changed();
    return qp.release();
}

Result<ibv_qp *> PortTransport::open_tgt(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept {
    ibv_qp_open_attr attr{};
    attr.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    attr.qp_num = tgt_qpn;
    attr.xrcd = domain_->get();
    attr.qp_type = IBV_QPT_XRC_RECV;
    QpPtr qp(ibv_open_qp(context(), &attr));
    if (!qp) return Error::from_errno("ibv_open_qp");
    // The QP number may have been reused by another connection since the message arrived: hold only the QP that
    // is connected to the message's initiator.
    ibv_qp_attr qattr{};
    ibv_qp_init_attr init{};
    if (ibv_query_qp(qp.get(), &qattr, IBV_QP_DEST_QPN, &init) != 0 || qattr.dest_qp_num != ini_qpn)
        return Error(ErrorKind::gone, "it belongs to another connection now");
    changed();
    return qp.release();
}

bool PortTransport::reserve_completions(std::size_t links) noexcept {
    home_links_.store(links, std::memory_order_relaxed);
    return grow_completions(links + other_links_.load(std::memory_order_relaxed));
}

bool PortTransport::grow_completions(std::size_t links) noexcept {
    const std::lock_guard<std::mutex> g(cq_mutex_);
    const std::size_t need = fixed_cqes_ + std::size_t(depth_) * (links + 1);  // +1: the loopback queue
    if (need <= static_cast<std::size_t>(cqe_)) return true;
    const std::size_t max_cqe = static_cast<std::size_t>(device_->device_attr.max_cqe);
    if (need > max_cqe) return false;
    const int grown = static_cast<int>(std::min(max_cqe, std::max(need, 2 * static_cast<std::size_t>(cqe_))));
    if (ibv_resize_cq(cq_.get(), grown) != 0) return false;
    cqe_ = cq_->cqe;
    return static_cast<std::size_t>(cqe_) >= need;
}

std::uint64_t PortTransport::now_us() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return std::uint64_t(ts.tv_sec) * 1000000u + std::uint64_t(ts.tv_nsec) / 1000u;
}

void PortTransport::link_failed(const NodeLink &link, const std::string &why) noexcept {
    changed();
    if (listener_.link_failed) listener_.link_failed(&link, why);
}

void PortTransport::note(const std::string &what) noexcept {
    if (serving) {
        try {
            std::lock_guard<std::mutex> g(notes_mutex_);
            notes_.push_back(what);
        } catch (...) {  // a verbose line lost to a full memory
        }
        raise();
        return;
    }
    if (listener_.note) listener_.note(what);
}

// -------------------------------------------------------------------------------------------------- loopback

// Inside a send (maybe under the queues' lock): the QPs are made by the next tick(), outside it.
void PortTransport::loopback_blocked(void *self) noexcept {
    auto *t = static_cast<PortTransport *>(self);
    t->loopback_wanted_.store(true);
    t->raise();
}

// The first on-node send through the HCA: the sender makes both ends, its INI QP and a TGT QP in the node's shared
// XRC domain, through which it reaches every local rank's SRQ. The TGT QP lives as long as the sender, which
// leaves only when every local rank has stopped receiving (leave_node).
void PortTransport::open_loopback() noexcept {
    lock_queues();
    bool wanted = (!loopback_ini_ || loopback_left_) && !loopback_queue_->broken();
    unlock_queues();
    {
        std::lock_guard<std::mutex> g(loopback_mutex_);
        wanted = wanted && !loopback_failed_;
    }
    if (!wanted) return;
    // Reported by tick(), with the queue's other failures.
    auto failed = [this](const std::string &why) noexcept {
        std::lock_guard<std::mutex> g(loopback_mutex_);
        try {
            loopback_error_ = why;
        } catch (...) {  // out of memory: reported without the reason
        }
        loopback_failed_ = true;
    };
    auto made_ini = create_ini();
    if (!made_ini) return failed(made_ini.error().message());
    QpPtr ini(*made_ini);
    auto made_tgt = create_tgt(address_, ini->qp_num);
    if (!made_tgt) return failed(made_tgt.error().message());
    QpPtr tgt(*made_tgt);
    if (auto connected = connect_ini(ini.get(), address_, tgt->qp_num); !connected)
        return failed(connected.error().message());
    if (!reserve_completions(cm_->live_ini_qps())) return failed("the completion queue cannot grow");
    // Under the queues' lock, as port_up() reads them and opens the queue: the port's state cannot change between
    // the test and the open.
    lock_queues();
    if (loopback_left_) {
        // The pair the queue left: its INI QP is in the error state, and the TGT QP goes with its last handle.
        loopback_left_ = false;
        count_connections_closed(*counters_, 1);
    }
    loopback_ini_ = std::move(ini);
    loopback_tgt_ = std::move(tgt);
    count_connection_opened(*counters_);
    if (!health_.down() && !cm_->abandoned())
        loopback_queue_->open(loopback_ini_.get(), loopback_tgt_->qp_num);  // else port_up() opens it
    unlock_queues();
    changed();
}

// The loopback queue is about to hand back what a timeout left unacknowledged: the copies its owners send again are
// prepared from their callbacks, so every on-node peer's next message is first of the next pair (the receivers
// count from 0 again there, and judge the copies against the old pair's counts), and the rings written through the
// pair that left are paused until their readers agree where the writes stopped. Progress, under the queues' lock.
void PortTransport::restart_loopback_peers(bool timed_out) noexcept {
    lock_queues();
    for (Peer *peer : loopback_peers_) peer->next_connection(timed_out ? RingAfter::paused : RingAfter::kept);
    unlock_queues();
}

// The loopback queue handed back and closed: a new pair is made by the next tick (open_loopback), the port's state
// deciding when the queue opens on it. After a timeout, the copies of what it did not acknowledge are queued.
void PortTransport::loopback_left(bool timed_out) noexcept {
    lock_queues();
    if (timed_out)
        for (Peer *peer : loopback_peers_) peer->copies_queued();
    loopback_left_ = true;
    unlock_queues();
    loopback_wanted_.store(true);
    raise();
}

PathSettings PortTransport::path_toward(const PortAddress &remote) const noexcept {
    PathSettings path = path_;
    path.mtu = std::min(path_.mtu, static_cast<ibv_mtu>(remote.mtu));  // the smaller of the two ports' MTUs
    path.use_grh = remote_subnet(remote);
    return path;
}

bool PortTransport::remote_subnet(const PortAddress &remote) const noexcept {
    return std::memcmp(remote.gid, address_.gid, 8) != 0;  // another subnet prefix: route by GID
}

}  // namespace xrc
