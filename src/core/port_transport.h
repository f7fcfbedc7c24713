// SPDX-License-Identifier: BSD-3-Clause
// Everything one process holds on one device port:
//   PD, one CQ (grown as connections are made), the job's XRC domain on the port (xrc_domain.h), one XRC SRQ per
//   receive class (RecvPool), the connection manager (connection_manager.h) with its UD channel, the INI QPs and
//   TGT QPs it makes, and a loopback INI + TGT pair for on-node peers, made only when xrc carries on-node traffic.
// Peers (xrc::Peer, embedded in the BTL endpoints) attach to it: a remote peer sends through the link to its
// node, an on-node peer through the loopback queue. Its address (address.h) is what the process publishes.
//
// Served by a thread (TransportConfig::served): the connection manager's UD QP then has its own CQ with a
// completion channel, whose fd the thread sleeps on (cm_event_fd, serve_cm, serve_timers); otherwise progress polls
// the UD QP's completions from the port's one CQ. Either way what the serving side records reaches the owner only
// from tick(), in progress: the listener is never called from the serving thread.
//
// Per process and port: O(receive classes) SRQs, one UD QP, O(nodes contacted) links, O(initiators that chose
// this process) TGT QPs, O(TGT QPs received through) handles. Nothing is O(N) in the job's node count.
#pragma once

#include "address.h"
#include "completion_kind.h"
#include "connection_manager.h"
#include "counters.h"
#include "device_discovery.h"
#include "job_managers.h"
#include "peer.h"
#include "port_health.h"
#include "qp_attr.h"
#include "receive_queue_spec.h"
#include "recv_pool.h"
#include "result.h"
#include "send_queue.h"
#include "status_record.h"
#include "ud_channel.h"
#include "verbs_owners.h"
#include "xrc_domain.h"

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace xrc {

struct TransportConfig {
    std::vector<ReceiveQueueClass> receive_classes;
    int cq_size = 8192;
    int send_queue_depth = 512;
    int max_inline = -1;  // -1: as much as the device gives, up to 256
    // Every queue keeps copies of the inline sends nobody owns (SendQueue::keep_copies), for the sends that assemble
    // into them: where links requeue after a refusal (CmConfig::requeue_refused) or ride outages on one rail
    // (CmConfig::outage_limit_us), and not with rail failover, whose sends each keep their fragment.
    bool keep_inline_copies = false;
    int signal_interval = 32;
    int poll_batch = 16;
    int mtu_bytes = 0;  // 0: the port's active MTU
    PathSettings path;
    std::string xrcd_dir;
    std::string job_name;              // unique per job and user: part of the XRC domain file's name
    unsigned local_ranks = 1;          // the job's ranks on this node (they share the XRC domain)
    std::uint32_t expected_links = 4;  // completion queue room made at start (eager mode: every remote node)
    std::uint32_t cm_receives = 512;
    std::uint64_t port_down_grace_us = 0;  // how long the port may stay down (0: forever) before its rail
                                           // is given up; up to cm.outage_limit_us where nothing else carries it
    CmConfig cm;  // my_rank, jobid, port_index, my_node, cap, timers (token and depths are filled in here)
    // A service thread serves the connection manager (cm_event_fd, serve_cm, serve_timers).
    bool served = false;
};

// Where every queue keeps copies of its inline sends (TransportConfig::keep_inline_copies), one per ring slot, the
// send queues are at most this deep: the copies then cost a connected link 128 x (208 + 256) bytes = 58 KiB, not
// 232 KiB at the default depth of 512, and its QP's own send queue shrinks as much. A completion retires a signal
// interval of requests a round trip after they were posted, so 128 requests in flight keep a link busy at any rate
// a process can post; a send beyond them waits in its queue, in order, as any send without credit does.
inline constexpr int kKeptCopiesDepth = 128;
// The depth of every send queue and INI QP of a transport: btl_xrc_send_queue_depth within the device's max_qp_wr,
// and at most kKeptCopiesDepth where copies are kept.
std::uint32_t send_queue_depth(const TransportConfig &config, int max_qp_wr) noexcept;

struct TransportCounts {
    std::size_t ini_qps = 0, tgt_qps_owned = 0, tgt_handles = 0, srqs = 0, receive_bytes = 0;
};

class PortTransport : private CmHost {
public:
    // The modex address of `rank` for this port, or null.
    using AddressLookup = std::function<const PortAddress *(std::uint32_t rank)>;
    struct Listener {
        // A connection failed (null: the on-node loopback pair could not be made); its sends have completed.
        std::function<void(const NodeLink *link, const std::string &why)> link_failed;
        // A link that had failed connects again (CmHost::link_revived). Progress, under the queues' lock.
        std::function<void(const NodeLink &link)> link_revived;
        std::function<void(const std::string &what)> note;
        // A QP was made, readied, opened or destroyed, or a connection failed: what describe() says has changed.
        // Called from inside the connection manager, before its own lists are updated: note it, read it later.
        std::function<void()> changed;
        // The lock the send queues' users hold (MPI_THREAD_MULTIPLE), taken by tick() around what it does to the
        // queues; null: none. Recursive: tick() may run inside a callback that holds it.
        std::function<void()> lock_queues, unlock_queues;
        // The port `port` (port_identity()) moved from LID `old_lid` to `new_lid`: the stored addresses of it, and
        // those fetched later, must say `new_lid` (CmHost::address_moved). From the serving thread or progress.
        std::function<void(std::uint64_t port, std::uint16_t old_lid, std::uint16_t new_lid)> address_moved;
    };

    // Every verbs object of the port made, the connection manager ready; or why not (nothing is left behind).
    static Result<std::unique_ptr<PortTransport>> make(std::shared_ptr<OpenedDevice> device, const UsablePort &port,
                                                       const TransportConfig &config, AddressLookup lookup,
                                                       Listener listener);
    PortTransport(const PortTransport &) = delete;
    PortTransport &operator=(const PortTransport &) = delete;
    ~PortTransport() override;

    const PortAddress &address() const noexcept { return address_; }
    // The fabric the port is on: the first half of its GID.
    const std::uint8_t (&subnet_prefix() const noexcept)[8] {
        return *reinterpret_cast<const std::uint8_t(*)[8]>(address_.gid);
    }
    const std::string &device_name() const noexcept { return device_->name; }
    std::uint8_t port_num() const noexcept { return port_.port; }
    // "device:port", as every message names the rail.
    std::string rail_name() const { return device_name() + ":" + std::to_string(port_num()); }
    ibv_pd *pd() const noexcept { return pd_.get(); }
    ibv_cq *cq() const noexcept { return cq_.get(); }
    ibv_context *context() const noexcept { return device_->context.get(); }
    std::uint32_t max_inline() const noexcept { return max_inline_.load(std::memory_order_relaxed); }
    // Every send queue of this transport (each link's, the loopback's) keeps copies of the inline sends nobody owns
    // (SendQueue::keep_copies), of up to max_inline() bytes: with TransportConfig::keep_inline_copies and inline
    // sends on.
    bool keeps_copies() const noexcept { return loopback_queue_->keeps_copies(); }
    TransportCounts counts() const noexcept;
    // What this port holds now, for the process's status record: device, XRC domain, SRQs, the connection
    // manager's QP, INI QPs per node, TGT QPs made, handles held. Host names are left empty, counters out.
    void describe(StatusPort &port) const;

    // `peer` (rank and modex address given) sends through the link to its node, or the loopback queue; a link made
    // now connects through `owner` (a rank of that node).
    void attach(Peer &peer, const PortAddress &address, std::uint32_t owner);
    void detach(Peer &peer) noexcept;
    // Another job's process (MPI_Comm_spawn, connect/accept; job_managers.h): `peer` sends through a link of the
    // manager of job `jobid`, made now (with `lookup` for that job's ranks) if the job was not met yet. Even on
    // this very port: that job's XRC domain is not ours, so the loopback pair cannot reach it.
    void attach_other(std::uint32_t jobid, Peer &peer, const PortAddress &address, std::uint32_t owner,
                      AddressLookup lookup);
    void detach_other(std::uint32_t jobid, Peer &peer) noexcept;
    // Job `jobid`'s last process left (del_procs): its connections drain and close, then its manager goes.
    void retire_job(std::uint32_t jobid) noexcept { others_->retire(jobid); }
    // Managers of other jobs held now (retiring ones included).
    std::size_t other_jobs() const noexcept { return others_->size(); }
    // Eager mode: connect now to the node of `target` (the address of `owner` there), through `owner`.
    void connect_node(const PortAddress &target, std::uint32_t owner);

    // Where connections, the connection manager's datagrams and registrations are counted (the module's
    // counters; they outlive the transport).
    void count_into(Counters *counters) noexcept;

    // Polls the CQ once (up to the configured poll_batch completions): decodes each one's work request id and
    // immediate data, completes send operations, reposts receive buffers, serves the connection manager's, and
    // tells `sink` only what is for its owner. Returns the completions polled. Defined in port_progress.h, with
    // what a sink provides.
    template <class Sink>
    int progress(Sink &sink) noexcept;

    // Served transports only. The fd that becomes readable when a datagram arrived or was sent (non-blocking).
    int cm_event_fd() const noexcept { return cm_channel_ ? cm_channel_->fd : -1; }
    // The serving thread: handles every datagram that arrived (CONNECT and CLOSE are answered here), re-arms.
    void serve_cm() noexcept;
    // The serving thread: due retransmissions. Returns when next due (CLOCK_MONOTONIC us), UINT64_MAX if never.
    std::uint64_t serve_timers() noexcept;
    // Called (from any thread) when a timer was set, so that the serving thread looks again. Replacing it waits for
    // a call of the old one under way: once this returns with an empty function, the old one is never called again
    // (the serving thread may be destroyed).
    void on_timers_changed(std::function<void()> wake) {
        std::lock_guard<std::mutex> g(wake_mutex_);
        wake_ = std::move(wake);
    }
    // The connections whose senders closed them since the last call (replay_filter.h: their counts can go), into
    // `out` (emptied first). Progress.
    void take_closed_sources(std::vector<SourceKey> &out) noexcept;
    // Work for progress was recorded by another thread (the owner's own, like an async event): busy() says so.
    void raise() noexcept { service_due_.store(true, std::memory_order_release); }
    // Clears what raise() set; true if it was set.
    bool take_raised() noexcept {
        return service_due_.load(std::memory_order_relaxed) && service_due_.exchange(false, std::memory_order_acquire);
    }
    // A message flagged kImmFirst arrived through the TGT QP `tgt_qpn` (wc.qp_num) from `ini_qpn` (wc.src_qp).
    void hold_tgt(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept;
    // Connection timers are running, work was recorded for progress, or the port is down: tick() wants calling
    // from progress. (A loopback failure is recorded and reported within one tick(), which raise() started.)
    bool busy() const noexcept {
        // Every flag read and one branch: progress asks on every call, and the answer is almost always no.
        const bool cm = cm_->busy(), raised = service_due_.load(std::memory_order_relaxed), others = others_->busy();
        return cm | raised | others;
    }
    // Progress: the connection manager's tick, and what the serving thread recorded for the listener.

    // The port went down (PORT_ERR, or a query found it not active): new posts on every send queue of the port are
    // held (they queue in order; nothing fails), what is in flight stays with the HCA. True when it was up.
    bool port_down() noexcept;
    // The port is active again: what was held goes out. True when it was down.
    bool port_up() noexcept;
    const PortHealth &health() const noexcept { return health_; }
    // The port now has LID `new_lid` (LID_CHANGE, CLIENT_REREGISTER, or a query found it): this process's address
    // says so, its loopback pair moves to it, and the job is told (ConnectionManager::announce_lid). Progress only.
    // False when the LID is the one it had.
    bool lid_changed(std::uint16_t new_lid) noexcept;
    // The rail is given up (ConnectionManager::abandon), the on-node loopback queue with it.
    void abandon() noexcept;
    // The rail given up is usable again, its port back (ConnectionManager::revive, for every job's manager): false
    // when it was not given up. The failed on-node loopback pair goes; the next on-node send makes a new one. The
    // caller moves the on-node peers back (their next message a first message). Progress, under the queues' lock.
    bool revive() noexcept;
    bool abandoned() const noexcept { return cm_->abandoned(); }
    // This job's links riding an outage toward nodes another rail reaches again fail now
    // (ConnectionManager::hand_over_riding).
    void hand_over_riding(const std::function<bool(const NodeLink &)> &reached_elsewhere) noexcept {
        cm_->hand_over_riding(reached_elsewhere);
    }
    // The port has been down longer than the grace period (port_down_grace_us).
    bool port_grace_expired() noexcept { return health_.grace_expired(now_us()); }
    // ... and longer than the outage limit too (PortHealth::outage_expired).
    bool port_outage_expired() noexcept { return health_.outage_expired(now_us()); }
    // What `op` is when the transport itself posted it (a link's drain fence, the loopback fence): a description;
    // null for an operation of the upper layer. Error paths only (a search over the links).
    const char *own_operation(const SendOp *op) const noexcept;
    // The link whose send queue `queue` is; null for the loopback queue (or an unknown one).
    const NodeLink *link_of(const SendQueue &queue) const noexcept { return cm_->link_of(queue); }
    bool is_loopback(const SendQueue &queue) const noexcept { return &queue == loopback_queue_.get(); }
    // Who the QP numbered `qp_num` belongs to on this port (INI, TGT, handle, loopback, the CM's UD QP).
    QpRole role_of(std::uint32_t qp_num) const noexcept;
    void tick() noexcept;

    // True when no operation that reports its completion is outstanding or queued on any send queue.
    bool all_reported() const noexcept;
    bool any_broken() const noexcept;

    // Finalize: every send queue drains (fences retire unsignaled sends) and every connection is closed; new
    // connections are refused.
    void begin_finalize() noexcept;
    // Finalize can end: drained, closed, and every TGT QP this process made was closed by its initiator.
    bool finished() const noexcept;
    // Finalize's own part is done; only initiators on other nodes may still have to close TGT QPs of ours.
    bool own_work_finished() const noexcept;
    // Those initiators are told this process leaves (ConnectionManager::leave_initiators); finished() holds once
    // each answered. Then the TGT QPs of those that did not are dropped (ConnectionManager::drop_initiators).
    std::string leave_initiators() noexcept;
    std::string drop_initiators() noexcept;
    // Only other jobs' initiators are told, at once: they have no finalize of their own to reach with ours
    // (JobManagers::leave_initiators). Returns them as leave_initiators() does, empty when there were none.
    std::string leave_other_jobs() noexcept;
    // Rank `rank` of this job died (ConnectionManager::peer_died).
    void peer_died(std::uint32_t rank) noexcept { cm_->peer_died(rank); }
    bool is_dead(std::uint32_t rank) const noexcept { return cm_->is_dead(rank); }
    // The set of ranks known to be finalizing, shared by every rail of the process (ConnectionManager).
    void share_finalizing_ranks(FinalizingRanks *shared) noexcept { cm_->share_finalizing_ranks(shared); }
    bool said_finalizing(std::uint32_t rank) const noexcept { return cm_->said_finalizing(rank); }
    // Every rank of the node of `rank` died (ConnectionManager::node_died).
    void node_died(std::uint32_t rank) noexcept { cm_->node_died(rank); }
    // A TGT QP of this port (made or opened) is in the error state (ConnectionManager::release_broken_tgt).
    bool release_broken_tgt(std::uint32_t tgt_qpn) noexcept { return cm_->release_broken_tgt(tgt_qpn); }
    // This job's rank `sender` no longer reaches us over this rail (ConnectionManager::drop_initiator).
    std::string drop_initiator(std::uint32_t sender) noexcept { return cm_->drop_initiator(sender); }
    // How long finalize waits for their answers before drop_initiators() (CmConfig::leaving_wait_us).
    std::uint64_t leaving_wait_us() const noexcept { return cm_->config().leaving_wait_us; }

private:
    // What `of` says for our own job's manager, then for each other job's (prefixed with its job), joined by "; ".
    std::string joined_over_jobs(std::string (ConnectionManager::*of)() noexcept) noexcept;
    class OtherJobHost;
    // The CQ's room for `links` INI QPs in all (every job's manager), grown if needed (any manager's thread).
    bool grow_completions(std::size_t links) noexcept;
    // A queue is about to take a refusal or a timeout without breaking (progress()): what its peers are sent from
    // now on goes over the next connection, numbered from its first message.
    void requeueing(SendQueue &queue, ibv_wc_status status) noexcept {
        if (is_loopback(queue))
            restart_loopback_peers(status == IBV_WC_RETRY_EXC_ERR);
        else
            cm_->restart_streams(queue, status == IBV_WC_RETRY_EXC_ERR);
    }
    // It took it: the link connects again; the loopback queue gets a new pair (open_loopback) when its copies queue.
    void refused(SendQueue &queue, ibv_wc_status status) noexcept {
        if (is_loopback(queue))
            loopback_left(status == IBV_WC_RETRY_EXC_ERR);
        else
            cm_->reconnect(queue, status == IBV_WC_RETRY_EXC_ERR);
    }
    void restart_loopback_peers(bool timed_out) noexcept;
    void loopback_left(bool timed_out) noexcept;
    // It broke (its owners heard of it first): a link of this job's may have its node probed until it answers.
    [[gnu::cold]] void broke(SendQueue &queue) noexcept { cm_->queue_broke(queue); }
    // A completion of the CQ whose kind is cm_receive or cm_send (progress() and the served channel's loop).
    void on_cm_completion(const ibv_wc &wc) noexcept;
    PortTransport(std::shared_ptr<OpenedDevice> device, const UsablePort &port, const TransportConfig &config,
                  AddressLookup lookup, Listener listener);
    // The PD, CQs, XRC domain, SRQs and UD channel, in that order; the destructor undoes whatever of it was done.
    Result<void> open(const TransportConfig &config);

    // CmHost
    const PortAddress *address_of(std::uint32_t rank) noexcept override { return lookup_(rank); }
    void send_datagram(const PortAddress &to, const CmBytes &bytes) noexcept override;
    Result<ibv_qp *> create_ini() noexcept override;
    Result<void> connect_ini(ibv_qp *ini, const PortAddress &target, std::uint32_t tgt_qpn) noexcept override;
    Result<ibv_qp *> create_tgt(const PortAddress &initiator, std::uint32_t ini_qpn) noexcept override;
    Result<ibv_qp *> open_tgt(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept override;
    void address_moved(std::uint64_t port, std::uint16_t old_lid, std::uint16_t new_lid) noexcept override {
        if (listener_.address_moved) listener_.address_moved(port, old_lid, new_lid);
    }
    Result<bool> migrate_path(ibv_qp *qp, std::uint16_t old_lid, std::uint16_t new_lid) noexcept override;
    void destroy_qp(ibv_qp *qp) noexcept override {
        (void)ibv_destroy_qp(qp);
        changed();
    }
    void fail_qp(ibv_qp *qp) noexcept override;
    bool reserve_completions(std::size_t links) noexcept override;
    std::uint64_t now_us() noexcept override;
    void link_failed(const NodeLink &link, const std::string &why) noexcept override;
    void link_revived(const NodeLink &link) noexcept override {
        if (listener_.link_revived) listener_.link_revived(link);
    }
    void note(const std::string &what) noexcept override;
    void timers_changed() noexcept override {
        std::lock_guard<std::mutex> g(wake_mutex_);  // a leaf: wake_ only pokes the serving thread's poll
        if (wake_) wake_();
    }
    void lock_queues() noexcept override {
        if (listener_.lock_queues) listener_.lock_queues();
    }
    void source_closed(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept override;
    void unlock_queues() noexcept override {
        if (listener_.unlock_queues) listener_.unlock_queues();
    }

    // Our path settings toward a remote port: the common MTU, and a GRH when it is in another subnet.
    PathSettings path_toward(const PortAddress &remote) const noexcept;
    bool remote_subnet(const PortAddress &remote) const noexcept;
    static void loopback_blocked(void *self) noexcept;
    void open_loopback() noexcept;
    // From the serving thread, the listener hears of it in the next tick().
    void changed() noexcept;
    void flush_serving_notes() noexcept;

    std::shared_ptr<OpenedDevice> device_;
    UsablePort port_;
    AddressLookup lookup_;
    Listener listener_;
    PathSettings path_;
    // Lowered by the connection manager's thread when a QP gets less than asked for, read by the send paths
    // without its mutex (the value a send reads was true of every QP made before it).
    std::atomic<std::uint32_t> max_inline_{0};
    std::uint32_t inline_wanted_ = 0;
    std::uint32_t depth_ = 0;
    std::uint32_t signal_interval_ = 1;
    std::uint32_t poll_batch_ = 16;
    std::size_t fixed_cqes_ = 0;  // receives and the UD channel's entries
    int cqe_ = 0;
    PortAddress address_;

    // Declaration order is destruction order reversed: QPs (the connection manager's and the loopback's) before
    // the UD channel, SRQs, the XRCD, CQ and PD.
    PdPtr pd_;
    CqPtr cq_;
    CompChannelPtr cm_channel_;  // served only: the UD QP's own CQ and its channel
    CqPtr cm_cq_;
    std::mutex wake_mutex_;  // guards wake_: set by the owner, called by any thread that sets a timer
    std::function<void()> wake_;
    std::atomic<bool> service_due_{false};
    std::atomic<bool> changed_due_{false};
    std::mutex notes_mutex_;
    std::vector<std::string> notes_;         // from the serving thread, said by tick()
    std::vector<SourceKey> closed_sources_;  // under notes_mutex_: source_closed() until take_closed_sources()
    std::unique_ptr<XrcDomain> domain_;
    std::vector<std::unique_ptr<RecvPool>> pools_;
    std::unique_ptr<UdChannel> ud_;
    std::unique_ptr<ConnectionManager> cm_;
    std::unique_ptr<JobManagers> others_;  // other jobs' managers: after cm_ (their handles are held there)
    std::mutex cq_mutex_;                  // grow_completions: managers of several jobs may grow the CQ
    std::atomic<std::size_t> home_links_{0}, other_links_{0};  // INI QPs the CQ holds room for, per side
    std::unique_ptr<SendQueue> loopback_queue_;
    QpPtr loopback_ini_;
    QpPtr loopback_tgt_;
    SendOp loopback_fence_;
    // The loopback pair could not be made (open_loopback, in tick()): reported once by the tick that takes it. Any
    // progressing thread ticks; the mutex (a leaf) guards both.
    std::mutex loopback_mutex_;
    bool loopback_failed_ = false;
    std::atomic<bool> loopback_wanted_{false};  // a send queued: tick() makes the pair
    // The loopback queue left its pair after a timeout (riding an outage): the next pair replaces it. Under the
    // queues' lock, as are the on-node peers attached to the loopback queue (their next message starts the next
    // pair's numbering). O(P) per process: the ranks of this node.
    bool loopback_left_ = false;
    std::vector<Peer *> loopback_peers_;
    PortHealth health_;  // thread-safe itself; its transitions are made under the queues' lock (port_down/up)
    bool finalizing_ = false;
    std::string loopback_error_;  // why, under loopback_mutex_
    Counters uncounted_;          // until count_into() names the real ones
    Counters *counters_ = &uncounted_;
};

}  // namespace xrc
