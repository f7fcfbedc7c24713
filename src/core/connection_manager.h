// SPDX-License-Identifier: BSD-3-Clause
// Connections on demand: one XRC INI QP per (process, remote node), connected to one TGT QP on that node, made
// through a small datagram protocol (wire_format.h, CmMessage) between the processes' connection managers, one
// per port per process on a UD QP. Nothing here trusts the launcher: a send never reaches a TGT QP before its
// creator said it is ready, whatever the job's fences did.
//
// Initiator (this process -> node K), a NodeLink per node:
//   idle -> connecting: the first send that queues on the link's SendQueue (or, in eager mode, MPI_Init) creates
//     the INI QP and sends CONNECT to one rank R of K (the link's `owner`: the first peer on K this process
//     wanted to reach, or in eager mode one chosen to spread the load), retransmitting with exponential backoff;
//     sends to K queue in order meanwhile.
//   connecting -> connected: R's ACCEPT names the TGT QP it made; the INI QP goes to RTR/RTS and the queued sends
//     go out. Every rank of K is now reached through it: the work requests name each rank's SRQ, whose number is
//     in its modex blob, so no further handshake is needed.
//   connected -> draining -> idle: eviction (more nodes wanted than btl_xrc_max_ini_qps) or finalize: no new
//     posts, a signaled fence retires what was posted, then the INI QP is destroyed and CLOSE tells R and every
//     rank of K that may hold a handle on the TGT QP to drop it. Sends that queued meanwhile reconnect the link.
//   any -> failed: no answer within the connect timeout, a REJECT, or a QP that cannot be made: queued sends
//     complete with an error and the host is told (the BTL's error callback names peer, node, device, port).
// Target (some process -> this node), per accepted CONNECT: a TGT QP in the node's XRC domain, made and readied
//   toward the initiator's INI QP before ACCEPT goes out, and kept until CLOSE. A duplicate CONNECT (the ACCEPT
//   was lost) gets the same ACCEPT again; a CONNECT older than a closed generation is ignored. Every other rank
//   that receives through the TGT QP opens its own handle on its first message (hold_tgt), so the QP lives as
//   long as someone receives through it. When processes may die and the job go on, one node-mate holds it before
//   ACCEPT goes out (HOLD, HELD: cm_holder.cc), so that it outlives its creator even before anyone received.
// Datagrams are validated before anything is made: size, magic, version, job, destination rank and port, the
// destination's random token (only the job's processes can read it from the modex), and the sender's UD address
// against its modex blob. Anything else is counted and dropped.
//
// Scale: per process, a NodeLink per node it talks to (O(nodes contacted), never O(N)), a TGT QP per initiator
// that chose it, a handle per TGT QP it received a first message through or was asked to hold.
//
// Threads: the manager is shared by whoever serves its datagrams and timers (the BTL's service thread, or progress
// when there is none) and the threads that send and progress. One mutex, the manager's own, guards it: every
// public member takes it (the send queues' "blocked" hook too). Control path only. Under it the manager makes and
// readies QPs (which may block), but it never touches a link's send queue from the serving side, and never calls
// up into its owner: what must (opening a link's queue once the target accepted, failing a link and its queued
// sends, answering a REJECT, connecting back toward an initiator) is recorded, and tick() does it, from progress,
// with the mutex released around anything that completes a send. So the lock order is always "send queue's
// user, then manager", and nothing under the manager's mutex ever waits for a send queue's user.
#pragma once

#include "address.h"
#include "async_event_policy.h"
#include "cm_message.h"
#include "counters.h"
#include "finalizing_ranks.h"
#include "peer.h"
#include "result.h"
#include "send_queue.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace xrc {

class NodeLink;

// What the connection manager needs from the verbs world and tells its owner. PortTransport implements it with
// real verbs and the UD channel; the unit tests with fakes. Control path only.
class CmHost {
public:
    virtual ~CmHost() = default;
    // A peer's modex address for this port, or null (no xrc there, or malformed).
    virtual const PortAddress *address_of(std::uint32_t rank) noexcept = 0;
    // One datagram to the connection manager at `to`. A datagram that cannot be posted is lost like any other.
    virtual void send_datagram(const PortAddress &to, const CmBytes &bytes) noexcept = 0;
    // The QPs below are the caller's to destroy (destroy_qp); a Result that holds one holds a non-null pointer.
    // An INI QP in INIT, or why it cannot be made.
    virtual Result<ibv_qp *> create_ini() noexcept = 0;
    // INIT -> RTR -> RTS toward the TGT QP `tgt_qpn` of the process at `target`, or why not.
    virtual Result<void> connect_ini(ibv_qp *ini, const PortAddress &target, std::uint32_t tgt_qpn) noexcept = 0;
    // A TGT QP in RTS toward the INI QP `ini_qpn` of the process at `initiator`, or why not.
    virtual Result<ibv_qp *> create_tgt(const PortAddress &initiator, std::uint32_t ini_qpn) noexcept = 0;
    // This process's own handle on the TGT QP `tgt_qpn` if it is connected to `ini_qpn`, or why not.
    virtual Result<ibv_qp *> open_tgt(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept = 0;
    virtual void destroy_qp(ibv_qp *qp) noexcept = 0;
    // The HCA port `port` (port_identity()) of other processes moved from LID `old_lid` to `new_lid`: every stored
    // address of it (any rank) says `new_lid` from now on, and so does one fetched later.
    virtual void address_moved(std::uint64_t port, std::uint16_t old_lid, std::uint16_t new_lid) noexcept = 0;
    // `qp` (an INI QP, a TGT QP or a handle on one) moves to a path toward `new_lid` if its path goes to `old_lid`
    // and it is in RTS: the alternate path is loaded and armed, then migrated to (what it had unacknowledged is
    // resent on the new path by the HCA). True: moved; false: nothing to do; or why it could not be moved.
    virtual Result<bool> migrate_path(ibv_qp *qp, std::uint16_t old_lid, std::uint16_t new_lid) noexcept = 0;
    // The rail is given up (abandon): the INI QP moves to the error state, so the HCA neither retransmits nor
    // delivers what was posted on it any more. Nothing by default (a host without verbs QPs).
    virtual void fail_qp(ibv_qp *) noexcept {}
    // Room in the completion queue for `links` INI QPs with full send queues; false if it cannot grow.
    virtual bool reserve_completions(std::size_t links) noexcept = 0;
    virtual std::uint64_t now_us() noexcept = 0;
    // The link failed: its queued sends have completed with an error already.
    virtual void link_failed(const NodeLink &link, const std::string &why) noexcept = 0;
    // A link that had failed connects again (ConnectionManager::revive, or a CONNECT from its node arrived): what
    // its peers' traffic moved to elsewhere may come back. Progress, under the queues' lock.
    virtual void link_revived(const NodeLink & /*link*/) noexcept {}
    // A line for the verbose output (connection set-up level).
    virtual void note(const std::string &what) noexcept = 0;
    // A timer was set (a connection started, a CLOSE is to be acknowledged): whoever serves timers looks again.
    virtual void timers_changed() noexcept {}
    // The sender closed the connection from its INI QP `ini_qpn` to our TGT QP `tgt_qpn`, after its fence retired
    // everything it posted there: nothing it carried will ever be sent again (replay_filter.h). Under the
    // manager's mutex, on whichever thread serves datagrams: record it, act later.
    virtual void source_closed(std::uint32_t /*tgt_qpn*/, std::uint32_t /*ini_qpn*/) noexcept {}
    // Around what tick() does to the links' send queues (opening, draining, failing them): the lock their other
    // users (senders, progress) hold, if any. Never held by the manager while it makes or readies a QP.
    virtual void lock_queues() noexcept {}
    virtual void unlock_queues() noexcept {}
};

// A QP made by the host, destroyed through it exactly once.
class HostQp {
public:
    HostQp() = default;
    HostQp(CmHost *host, ibv_qp *qp) noexcept : host_(host), qp_(qp) {}
    HostQp(HostQp &&other) noexcept : host_(other.host_), qp_(other.qp_) { other.qp_ = nullptr; }
    HostQp &operator=(HostQp &&other) noexcept {
        if (this != &other) {
            reset();
            host_ = other.host_;
            qp_ = other.qp_;
            other.qp_ = nullptr;
        }
        return *this;
    }
    HostQp(const HostQp &) = delete;
    HostQp &operator=(const HostQp &) = delete;
    ~HostQp() { reset(); }
    ibv_qp *get() const noexcept { return qp_; }
    explicit operator bool() const noexcept { return qp_ != nullptr; }
    void reset() noexcept {
        if (qp_ != nullptr) host_->destroy_qp(qp_);
        qp_ = nullptr;
    }

private:
    CmHost *host_ = nullptr;
    ibv_qp *qp_ = nullptr;
};

struct CmConfig {
    std::uint32_t my_rank = 0;
    std::uint32_t jobid = 0;
    std::uint32_t port_index = 0;
    std::uint32_t my_node = 0;  // the launcher's node id: a label for messages
    std::uint64_t my_port = 0;  // port_identity() of this process's address: what "my node" means here
    std::uint64_t my_token = 0;
    std::uint32_t queue_depth = 512;
    std::uint32_t signal_interval = 32;
    std::uint32_t max_ini_qps = 0;  // 0: no cap
    std::uint64_t first_retry_us = 2000;
    std::uint64_t max_retry_us = 500000;
    // Added to a CONNECT's first retransmission delay per connection this process is making already: in a storm
    // (all-to-all from cold) each owner has about as many CONNECTs to answer as each initiator has in flight, and
    // answers them one TGT QP at a time, so retransmitting sooner only fills its UD receive queue with copies.
    // About the time one TGT QP takes to make.
    std::uint64_t retry_per_connecting_us = 200;
    std::uint64_t connect_timeout_us = 60000000;
    // A rank that does not answer CONNECT for this long (0: connect_timeout_us / 4) is asked no more: the link
    // tries another rank of the node its sends are for (any rank of a node can make the TGT QP), within the same
    // connect timeout. Silence alone cannot tell a rank that left (its MPI_Finalize over) from a busy one without a
    // service thread, or from a lost path; another rank may answer either way.
    std::uint64_t rotate_after_us = 0;
    // How long a TGT QP's creator that told its initiator LEAVING keeps the TGT QP (and its SRQ) for the answer.
    // The initiator fences toward the creator's SRQ only within half of it after LEAVING arrived, so that the
    // fence finds that SRQ still there with time to spare.
    std::uint64_t leaving_wait_us = 2500000;
    // How long the HCA retransmits a request nobody acknowledges before it fails it (retry_budget_us() of the
    // path's timeout and retry count; 0: without limit). An INI QP whose unsignaled sends no fence may retire (the
    // TGT QP's creator left) is kept that long after its last unsignaled post, with the port up: a request still
    // unacknowledged by then has failed with an error completion, so the others were acknowledged.
    std::uint64_t retry_budget_us = 34359738;  // timeout 20, retry count 7
    // Every operation posted on a link is kept until its completion, by its owner or as a copy in the link's queue:
    // a request the responder refused, its SRQ or memory gone with a process that died, costs only itself
    // (SendQueue::requeue_refused), and the link connects again for what followed it (reconnect).
    bool requeue_refused = false;
    // The largest inline send, which each link's queue keeps copies of (SendQueue::keep_copies), to send them again
    // after a refusal (requeue_refused) or hand them back after a timeout (outage_limit_us); 0: none, so an inline
    // send without an owner is not sent again.
    std::uint32_t kept_copy_bytes = 0;
    // How long a link whose requests the HCA gave up on (its port or path down past the retry budget) keeps trying
    // to connect again before it fails (0: it does not try; a timeout breaks its queue). Its queue then hands what
    // was not acknowledged back to its owners, who send it again, numbered (SendQueue::ride_outages).
    std::uint64_t outage_limit_us = 0;
    // Accepting a connection from a node this process has no connection to starts one back (MPI traffic almost
    // always goes both ways: replies, rendezvous acknowledgements), unless the cap would need an eviction.
    bool reciprocate = true;
    // Who hears of a LID change of this process's port besides its own links' peers (announce_lid): the ranks
    // r < job_size with r % local_count == local_index, so that the node's ranks together tell the whole job.
    std::uint32_t job_size = 0;
    std::uint32_t local_index = 0;
    std::uint32_t local_count = 1;
    // A manager for the processes of another job (MPI_Comm_spawn, connect/accept: job_managers.h): datagrams are
    // accepted only from `peer_jobid`, and its senders on this very port get links like any remote node (their
    // XRC domain is not ours, so the loopback pair cannot reach them). What it sends still names `jobid`, ours.
    bool other_job = false;
    std::uint32_t peer_jobid = 0;
    // A process may die and the job go on (User-Level Failure Mitigation): every TGT QP this process makes is held
    // by one of `node_mates` too (HOLD, before ACCEPT), so that it outlives its creator even when no other rank of
    // the node has received through it yet; without that, the connections made through a rank that dies before any
    // message to its node-mates would reach nothing.
    bool node_mate_holds = false;
    std::vector<std::uint32_t> node_mates;  // the other ranks of this node (empty: unknown)
    // How long a creator waits for HELD before it accepts without a holder (a node-mate that does not answer).
    std::uint64_t hold_wait_us = 2000000;
    // Another rail carries the traffic of a link whose queue broke (rail failover): while this process's own port is
    // up, the link's node is asked whether it is reachable again (PROBE), first after `first_probe_us`, then at
    // doubling intervals up to `max_probe_us`; its answer (or a PROBE or CONNECT from it) starts the link over, and
    // the host moves the traffic back (link_revived). Without it a path lost and found again with no port event
    // (both ports stayed up, or came back within the grace) left the traffic on the other rail for good.
    bool probe_broken_links = false;
    std::uint64_t first_probe_us = 1000000;
    std::uint64_t max_probe_us = 30000000;
};

class NodeLink {
public:
    enum class State : std::uint8_t { idle, waiting, connecting, connected, draining, failed };

    std::uint32_t node() const noexcept { return node_; }
    State state() const noexcept { return state_; }
    SendQueue &queue() noexcept { return queue_; }
    const SendQueue &queue() const noexcept { return queue_; }
    std::uint32_t owner() const noexcept { return owner_; }
    std::uint32_t generation() const noexcept { return generation_; }
    std::uint32_t ini_qpn() const noexcept { return ini_ ? ini_.get()->qp_num : 0; }
    std::uint32_t tgt_qpn() const noexcept { return tgt_qpn_; }
    // The creator's node-mate that holds a handle on the TGT QP too (kCmNoRank: none).
    std::uint32_t holder() const noexcept { return holder_; }
    const std::vector<Peer *> &peers() const noexcept { return peers_; }
    // Every rank of the node died (ConnectionManager::node_died): the link failed with nobody to report it to, and
    // nothing waits for it (a flush, finalize).
    bool node_dead() const noexcept { return node_dead_; }

    NodeLink(class ConnectionManager &cm, std::uint64_t port, std::uint32_t node, std::uint32_t owner,
             std::uint32_t depth, std::uint32_t signal_interval);
    NodeLink(const NodeLink &) = delete;
    NodeLink &operator=(const NodeLink &) = delete;

private:
    friend class ConnectionManager;
    static void blocked(void *self) noexcept;
    static void fence_done(SendOp *, ibv_wc_status) noexcept {}

    class ConnectionManager &cm_;
    std::uint64_t port_;  // port_identity() of the node's port: the link's key, and what "which node" means
    std::uint32_t node_;  // the launcher's node id: a label for messages
    std::uint32_t owner_;
    State state_ = State::idle;
    SendQueue queue_;
    HostQp ini_;
    std::uint32_t generation_ = 0;
    std::uint32_t tgt_qpn_ = 0;
    std::uint32_t holder_ = kCmNoRank;
    std::uint32_t attempts_ = 0;
    std::uint64_t next_retry_us_ = 0;
    std::uint64_t retry_us_ = 0;
    std::uint64_t deadline_us_ = 0;
    // When a silent owner is given up for another rank of the node (rotate_after_us; once per attempt: the rank
    // asked next has until the deadline), and the deadline an attempt through that rank inherits (0: a fresh
    // attempt, connect_timeout_us from its start).
    std::uint64_t rotate_at_us_ = 0;
    std::uint64_t inherited_deadline_us_ = 0;
    // Reconnecting after a timeout: the connection is not given up before this time (0: connect_timeout_us rules).
    std::uint64_t outage_until_us_ = 0;
    // Probing its node (CmConfig::probe_broken_links, while in ConnectionManager::probing_): the next PROBE and the
    // interval after it.
    std::uint64_t next_probe_us_ = 0;
    std::uint64_t probe_retry_us_ = 0;
    std::uint64_t probe_answered_us_ = 0;  // when a PROBE's answer last started it over (0: never)
    std::vector<Peer *> peers_;
    // The SRQ numbers of peers detached since (del_procs) with their ranks: what is still queued for them is
    // recognized as theirs (a finalizing rank's). O(ranks of the node) at most.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> departed_srqs_;
    // The rank whose SRQ `srqn` is, among the link's peers and those detached since; UINT32_MAX if none.
    std::uint32_t rank_of_srq(std::uint32_t srqn) const noexcept;
    SendOp fence_;
    bool fence_posted_ = false;
    // The TGT QP's creator is leaving (LEAVING, any state but none): every send is signaled from then on, the link
    // closes without a fence and without a CLOSE. The answer to LEAVING: what was posted before it is retired (a
    // fence toward the creator's SRQ while the creator still waits, posted at `leave_mark_`), then LEAVING_ACK.
    enum class Leave : std::uint8_t { none, retiring, fenced, answered } leave_ = Leave::none;
    bool target_left() const noexcept { return leave_ != Leave::none; }
    std::uint32_t leave_mark_ = 0;
    std::uint64_t left_at_us_ = 0;
    // Answered without a fence (too late for one): since then every post is signaled, so the unsignaled requests
    // still outstanding were all posted before this moment.
    bool unfenced_ = false;
    std::uint64_t unfenced_since_us_ = 0;
    bool opening_ = false;  // accepted; tick() has yet to open its queue
    // The TGT QP's creator died while the connection stood (peer_died): `owner_` is a live rank of the node now,
    // which may hold a handle on that TGT QP, but does not wait for our CLOSE (it made nothing for us) and may leave
    // first; at the close its answer is waited for no longer than leaving_wait_us.
    bool creator_gone_ = false;
    bool start_pending_ = false;  // wanted; tick() makes its INI QP
    bool node_dead_ = false;
};

const char *link_state_name(NodeLink::State state) noexcept;

class ConnectionManager {
public:
    ConnectionManager(CmHost &host, const CmConfig &config);
    ConnectionManager(const ConnectionManager &) = delete;
    ConnectionManager &operator=(const ConnectionManager &) = delete;
    ~ConnectionManager();

    const CmConfig &config() const noexcept { return config_; }
    const Counters &counters() const noexcept { return *counters_; }
    // Where connections and datagrams are counted (the module's counters; they outlive the manager).
    void count_into(Counters *counters) noexcept {
        Guard g(*this);
        counters_ = counters != nullptr ? counters : &uncounted_;
    }

    // The link to the node of the port `port` (port_identity() of its addresses), labelled `node` in messages
    // (made idle on first use; `owner` is the rank it will connect through).
    NodeLink &link_for(std::uint64_t port, std::uint32_t node, std::uint32_t owner);
    NodeLink &link_for(const PortAddress &address, std::uint32_t owner) {
        return link_for(port_identity(address), address.node_id, owner);
    }
    // `peer` is on the link's node: it sends through the link's queue and is told when a connection starts.
    void attach(Peer &peer, NodeLink &link);
    void detach(Peer &peer) noexcept;
    // Connects the link now if it is idle (eager mode), without evicting anything.
    void connect(NodeLink &link) noexcept;

    // A datagram arrived on the UD QP from (slid, src_qp).
    void on_datagram(std::span<const std::uint8_t> bytes, std::uint16_t slid, std::uint32_t src_qp) noexcept;
    // A message flagged kImmFirst arrived through the TGT QP `tgt_qpn` from the INI QP `ini_qpn`.
    void hold_tgt(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept;
    // The TGT QP numbered `tgt_qpn` (one this manager made, or a handle it holds) is in the error state: a request
    // of its sender was refused, or its path broke. The sender hears of it from its own completion and decides
    // (a new connection, another rail, or the end of the job); this side lets it go. True if it was ours.
    bool release_broken_tgt(std::uint32_t tgt_qpn) noexcept;
    // The TGT QP numbered `tgt_qpn` is one this manager made (its creator holds it already: no handle needed).
    bool owns_tgt(std::uint32_t tgt_qpn) const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return owned_qpns_.count(tgt_qpn) != 0;
    }
    // The handle on `tgt_qpn` (connected to `ini_qpn`), if this manager holds one, is released: its initiator
    // closed the connection (a CLOSE that reached another job's manager of this port: see keep_handles_in).
    void drop_handle(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept;
    // Handles on TGT QPs of this port are all held by `keeper` (the manager of this process's own job, which
    // hold_tgt reaches: a first message does not say which job sent it); a CLOSE this manager receives releases
    // the handle there. Called once, before any datagram; `keeper` outlives this manager, and never calls into it.
    void keep_handles_in(ConnectionManager *keeper) noexcept { handle_keeper_ = keeper; }
    // The ranks known to be finalizing go into (and are looked up in) `shared`, the set of every rail's home manager
    // of this process; called once, before any datagram; `shared` outlives this manager.
    void share_finalizing_ranks(FinalizingRanks *shared) noexcept { finalized_ranks_ = shared; }
    // Whether `rank` said, on any rail sharing the set, that it is in its BTL finalize.
    bool said_finalizing(std::uint32_t rank) const noexcept { return finalized_ranks_->contains(rank); }
    // Whenever this manager wants tick(), `flag` is raised too (the owner of several managers reads one flag).
    // Called once, before any use.
    void report_due_to(std::atomic<bool> *flag) noexcept { also_due_ = flag; }
    // A datagram of a job no manager of this port is for: counted as received and rejected, noted.
    void count_foreign(const std::string &why) noexcept;
    // The job whose datagrams this manager accepts.
    std::uint32_t peer_jobid() const noexcept { return config_.other_job ? config_.peer_jobid : config_.jobid; }

    // This process's port now has LID `new_lid` (it published `old_lid`, or announced it last): the stored addresses
    // of this port (the node's other ranks) are updated, and ADDRESS goes, retransmitted until answered or the
    // connect timeout, to every process with a link to or from this process and to the ranks of the job this
    // process speaks for (CmConfig::local_index): O(links + job_size / local_count). Nothing if `new_lid` is the
    // LID announced already. The QPs of this process need nothing: the HCA sends from the port's LID of the moment.
    void announce_lid(std::uint16_t old_lid, std::uint16_t new_lid) noexcept;
    // Processes told ADDRESS that have not answered yet.
    std::size_t unanswered_addresses() const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return address_notices_.size();
    }

    // Timers are running (connections being made or drained, CLOSEs unacknowledged) or recorded work waits:
    // tick() wants calling. One relaxed load: progress asks on every call.
    bool busy() const noexcept { return due_.load(std::memory_order_relaxed); }
    // Progress: timers, deadlines, drains, and the work the serving side recorded.

    // The port went down: nothing new is posted on any INI QP (sends queue, in order, as on a link being
    // connected; what was posted stays with the HCA, which retransmits it), connections being made or closed keep
    // their datagrams going but never give up while held. Idempotent.
    void hold() noexcept;
    // The port is back: queued sends go out, and connections under way get their full timeout again from now.
    void resume() noexcept;
    bool held() const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return held_;
    }
    // The port is given up for good (another rail carries its traffic): every INI QP is moved to the error state,
    // so the HCA neither retransmits nor delivers what was posted any more, and every link's queue fails with
    // `status`: what was in flight or queued completes upward with it, once. The links stay (failed, their QPs
    // in error) until the manager goes. Nothing is waited for through the rail from then on: no CONNECT, CLOSE,
    // LEAVING or ADDRESS is (re)sent, no connection is made (a send that queues fails; a CONNECT is refused), and
    // finalize does not wait for initiators to close the TGT QPs made for them (they cannot reach us through
    // it): busy() is false once the recorded work is done, finished() once this process's own work is.
    // Idempotent; resume() does nothing after it.
    void abandon(ibv_wc_status status) noexcept;
    // The rail given up is usable again (its port is back): the manager makes connections again, its links start
    // over (idle, their queues reset, their peers' next messages first messages, no eager ring: a write the rail
    // lost may have left a slot its reader would wait on forever), each tells the host (link_revived). False when
    // it was not abandoned, or is finalizing. Progress.
    bool revive() noexcept;
    // Links connecting again after a timeout (riding an outage: outage_limit_us) toward a node that, as
    // `reached_elsewhere` says, another rail reaches again: they fail now (link_failed, and what their queues hold
    // goes to its owners, who send it over that rail) instead of waiting up to the limit for this path, and their
    // nodes are probed (probe_broken_links) so that the traffic comes back when this path does. Progress, outside
    // the queues' lock (taken here, as tick() does; `reached_elsewhere` is called under it and the mutex).
    void hand_over_riding(const std::function<bool(const NodeLink &)> &reached_elsewhere) noexcept;
    bool abandoned() const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return abandoned_;
    }
    // The send queue `queue` broke (progress saw its first error, not one it requeues or hands back after): with
    // CmConfig::probe_broken_links its link's node is probed from now on (PROBE, by the serving side's timers),
    // until it answers and the link starts over. Nothing for a queue of no link, a dead node, or a rail given up.
    void queue_broke(const SendQueue &queue) noexcept;
    // The link whose send queue `queue` is, or null.
    const NodeLink *link_of(const SendQueue &queue) const noexcept;
    // True when `op` is a link's drain fence (posted by this manager, owned by no upper layer).
    bool is_fence(const SendOp *op) const noexcept;
    // Who the QP numbered `qp_num` belongs to among this manager's INI QPs, TGT QPs and handles.
    QpRole role_of(std::uint32_t qp_num) const noexcept;
    void tick() noexcept;
    // The serving side (service thread): retransmits CONNECTs and CLOSEs that are due; nothing that touches a send
    // queue. Returns when it next wants calling (CLOCK_MONOTONIC microseconds), or UINT64_MAX: no timer runs.
    std::uint64_t tick_timers() noexcept;

    // Finalize: every link drains (its fence retires what was posted) and is closed, new CONNECTs are refused.
    void begin_finalize() noexcept;
    // Every link has drained: nothing outstanding on any INI QP, nothing queued waiting for a connection.
    bool drained() const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return drained_locked();
    }
    // Finalize can end: drained, every CLOSE acknowledged, and every initiator closed the TGT QP it had from us
    // (so a node that leaves first takes nothing from a sender that still drains toward it).
    bool finished() const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return own_work_finished_locked() && (owned_.empty() || abandoned_);
    }

    // Finalize's own part is done: drained, every CLOSE acknowledged; only initiators may still hold TGT QPs of ours.
    bool own_work_finished() const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return own_work_finished_locked();
    }
    // Finalize waited its bound for initiators that are alive but have not closed: each is told LEAVING
    // (retransmitted until it answers). It retires what it posted toward this node before (a fence toward this
    // process's SRQ, which must still be there), answers LEAVING_ACK, and from then on signals every send, so that
    // it can close its link later without a fence, which this node's HCA could no longer answer once the TGT QP
    // is gone. An answer releases that TGT QP (finished() then holds once all answered). Returns "rank R's INI QP I
    // (TGT QP T)" for each, "; "-separated, empty when there were none.
    std::string leave_initiators() noexcept;
    // The wait for the answers is over (config().leaving_wait_us): the TGT QPs of initiators that did not answer
    // are dropped (a TGT QP lives on while another rank of this node holds a handle). Returns those initiators as
    // leave_initiators() does, empty when every one answered.
    std::string drop_initiators() noexcept;
    // Rank `sender` can no longer close what it had from us (the rail between us is lost: its traffic went over
    // another one): its TGT QPs go now, at finalize, without waiting for a close or a LEAVING_ACK that cannot come.
    // Returns them as drop_initiators() does, empty when it had none.
    std::string drop_initiator(std::uint32_t sender) noexcept;

    // Rank `rank` of this manager's job died (the runtime said so, or a request to it was refused): nothing waits
    // for it any more. What is queued for it completes with IBV_WC_REM_ABORT_ERR (from tick(), outside the
    // mutex); it is never chosen again to make a TGT QP: a link through it goes through a live rank of its node
    // from now on (one being made starts again through that rank; a made one stays, its TGT QP living on through
    // the handles of the node's other ranks; if no live rank holds one, the QP went with the dead: what the link
    // posted, all for them, completes with an error, and a new connection is made for what waits); the TGT QPs it had
    // from us go now, and no CLOSE, LEAVING or ADDRESS to it is waited for. Its CONNECTs still on their way are
    // ignored. Idempotent.
    void peer_died(std::uint32_t rank) noexcept;
    // Every rank of the node of `rank` died (the caller knows the node's ranks; each had peer_died first): the
    // connection to it goes at once, with what its queue held for them, and nothing is connected there again.
    void node_died(std::uint32_t rank) noexcept;
    bool is_dead(std::uint32_t rank) const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return dead_ranks_.count(rank) != 0;
    }
    // The INI QP of the link whose queue is `queue` met a refusal and the queue requeued what followed it
    // (SendQueue::requeue_after): the QP goes (without a fence or CLOSE: the refusal put the TGT QP in the error
    // state too, and its holders drop it on that event), the link is idle again (restart_streams made its peers'
    // next messages first messages before), and a new connection is made for what waits, through a live rank of the
    // node. Data path, under the queues' lock. Nothing for a queue that is no link's.
    // After a timeout (`timed_out`: SendQueue::hand_back_after) the same, without moving the link to another rank,
    // and the connection is tried for up to outage_limit_us (the port may stay down that long), not
    // connect_timeout_us.
    void reconnect(const SendQueue &queue, bool timed_out = false) noexcept;
    // The link whose queue is `queue` is about to requeue or hand back what it holds (SendQueue::would_requeue):
    // its peers' next messages are first messages (both ends count that connection from 0 again, and whatever is
    // prepared from now on, copies included, is numbered for the next connection), and after a timeout
    // (`timed_out`) their eager rings are paused (Peer::pause_ring): a write that was not acknowledged may have left
    // a span unwritten that the ring's reader would wait for, so what follows goes through the SRQs until the
    // reader, having taken the copies, agrees where the writes stopped (EagerManager, Resume). Data path, under the
    // queues' lock.
    void restart_streams(const SendQueue &queue, bool timed_out) noexcept;

    std::size_t live_ini_qps() const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return live_ini_;
    }
    std::size_t owned_tgts() const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return owned_.size();
    }
    std::size_t held_handles() const noexcept {
        std::lock_guard<std::mutex> g(mutex_);
        return opened_.size();
    }
    // Every link, for status listings (f runs under the manager's mutex: it must not call the manager).
    template <class F>
    void for_each_link(F &&f) const {
        std::lock_guard<std::mutex> g(mutex_);
        for (const auto &[node, link] : links_) f(*link);
    }
    // Every TGT QP this process made: f(sender, generation, sender's INI QPN, TGT QPN).
    template <class F>
    void for_each_owned(F &&f) const {
        std::lock_guard<std::mutex> g(mutex_);
        for (const auto &[key, t] : owned_) f(t.sender, t.generation, t.ini_qpn, t.tgt.get()->qp_num);
    }
    // Every handle this process opened on another local rank's TGT QP: f(TGT QPN, the remote INI QPN).
    template <class F>
    void for_each_opened(F &&f) const {
        std::lock_guard<std::mutex> g(mutex_);
        for (const auto &[qpn, h] : opened_) f(qpn, h.ini_qpn);
    }

private:
    friend class NodeLink;
    // The mutex, and on release whether tick() is due (what busy() reads without it).
    class Guard {
    public:
        explicit Guard(ConnectionManager &cm) : cm_(cm), lock_(cm.mutex_) {}
        ~Guard() { cm_.refresh_due(); }
        Guard(const Guard &) = delete;
        Guard &operator=(const Guard &) = delete;

    private:
        ConnectionManager &cm_;
        std::unique_lock<std::mutex> lock_;
    };
    // Guard for the serving side. Progress takes the mutex on every call while connections are being made or closed
    // (tick()), and a mutex is not fair: a datagram waiting for it could wait as long as progress spins, seconds on a
    // loaded machine, while its sender's connect timeout runs. So the waiter says it waits, and tick() skips its turn
    // until it got the mutex.
    class ServingGuard {
    public:
        explicit ServingGuard(ConnectionManager &cm) noexcept : announced_(announce(cm)), guard_(cm) {
            cm.serving_waiting_.fetch_sub(1, std::memory_order_release);
        }

    private:
        static bool announce(ConnectionManager &cm) noexcept {
            cm.serving_waiting_.fetch_add(1, std::memory_order_acq_rel);
            return true;
        }
        bool announced_;
        Guard guard_;
    };
    // Work recorded under the mutex for tick() to do in progress, in order.
    struct Deferred {
        enum class Kind : std::uint8_t {
            open,
            fail,
            reject,
            reciprocate,
            drop,
            drop_dead,
            node_dead,
            orphaned,
            revive
        } kind;
        NodeLink *link;
        std::uint32_t generation;          // open: the connection it was recorded for
        std::string why;                   // fail, drop; drop_dead: who died
        CmMessage message;                 // reject
        std::uint32_t node, rank;          // reciprocate
        std::uint64_t port;                // reciprocate: the initiator's port identity
        std::vector<std::uint32_t> srqns;  // drop_dead: the dead rank's SRQ numbers
    };
    bool drained_locked() const noexcept {
        return draining_.empty() && connecting_.empty() && waiting_.empty() && to_start_.empty();
    }
    bool own_work_finished_locked() const noexcept { return drained_locked() && notices_.empty() && deferred_.empty(); }
    void refresh_due() noexcept {
        const bool due = (held_ && !abandoned_) || !connecting_.empty() || !draining_.empty() || !waiting_.empty() ||
                         !notices_.empty() || !deferred_.empty() || !to_start_.empty() || !leaving_.empty() ||
                         awaiting_leaving_ack_ != 0 || awaiting_held_ != 0 || !address_notices_.empty();
        due_.store(due, std::memory_order_relaxed);
        if (due && also_due_ != nullptr) also_due_->store(true, std::memory_order_relaxed);
    }
    // A connection is to be started: tick() makes its INI QP, outside the send queues' lock.
    void start_later(NodeLink &link) noexcept;
    void start_wanted() noexcept;
    void run_deferred(std::vector<Deferred> &work) noexcept;
    void tick_locked(std::uint64_t now) noexcept;
    // The link whose send queue is `queue`, or null; the caller holds the mutex.
    NodeLink *link_with_queue_locked(const SendQueue &queue) const noexcept;
    // A failed link starts over (revive(), Deferred::Kind::revive): under the queues' lock and the mutex.
    void restart_failed(NodeLink &link) noexcept;
    struct OwnedTgt {
        std::uint32_t sender;
        std::uint32_t generation;
        std::uint32_t ini_qpn;
        HostQp tgt;
        bool leaving = false;  // told LEAVING; kept until LEAVING_ACK (or drop_initiators())
        std::uint64_t next_leaving_us = 0;
        std::uint64_t leaving_retry_us = 0;
        std::uint32_t leaving_attempts = 0;
        // node_mate_holds: the rank asked to hold it, and whether ACCEPT went out (after HELD, or without a holder
        // once hold_wait_us passed).
        std::uint32_t holder = kCmNoRank;
        bool accepted = true;
        std::uint32_t hold_attempts = 0;
        std::uint64_t next_hold_us = 0;
        std::uint64_t hold_retry_us = 0;
        std::uint64_t hold_deadline_us = 0;
    };
    using OwnedTgts = std::unordered_map<std::uint64_t, OwnedTgt>;  // by (sender, generation)
    // Destroys a TGT QP this process made (our handle on it) with its bookkeeping; the next entry.
    OwnedTgts::iterator release_owned(OwnedTgts::iterator it) noexcept;
    struct OpenedTgt {
        std::uint32_t ini_qpn;
        HostQp handle;
        // Opened on a creator's HOLD: the initiator and its connection (kCmNoRank: opened on a first message).
        std::uint32_t sender = kCmNoRank;
        std::uint32_t generation = 0;
    };
    using OpenedTgts = std::unordered_map<std::uint32_t, OpenedTgt>;  // by TGT QPN
    // Closes a handle this process holds on a node-mate's TGT QP, with its bookkeeping; the next entry.
    OpenedTgts::iterator release_opened(OpenedTgts::iterator it) noexcept;
    struct CloseNotice {
        std::uint32_t rank;
        std::uint32_t generation;
        std::uint32_t ini_qpn;
        std::uint32_t tgt_qpn;
        std::uint32_t attempts;
        std::uint64_t next_retry_us;
        std::uint64_t retry_us;
        std::uint64_t deadline_us;
    };

    NodeLink &link_for_locked(std::uint64_t port, std::uint32_t node, std::uint32_t owner);
    void connect_locked(NodeLink &link) noexcept;
    void wanted(NodeLink &link) noexcept;
    bool start(NodeLink &link) noexcept;
    void answer_reject(const CmMessage &m) noexcept;
    // Every send queued on `link` is for a rank that said it is finalizing (finalized_ranks_).
    bool only_for_finalized(const NodeLink &link) const noexcept;
    // Both sides finalizing, and what waits on `link` is only for ranks that said they are in their BTL finalize:
    // nothing above their BTL would take it any more (Open MPI finalizes a BTL after ob1 and osc closed), so they
    // drop whatever arrives. Dropped, not counted as lost, and the link goes back to idle; false (nothing done)
    // otherwise. (A process still running hears of a send to such a rank as a failure: it is the application's.)
    bool drop_for_finalized(NodeLink &link, const std::string &why) noexcept;
    // What is queued on `link`, by destination: "3 queued: rank 5 (SEND_WITH_IMM, 40 bytes), ...", for the line
    // that says work was not delivered.
    std::string describe_pending(const NodeLink &link) const noexcept;
    // What is queued on `link` for the SRQs `srqns` (ranks that died: `who`) is dropped by tick().
    void drop_dead_later(NodeLink &link, const std::vector<std::uint32_t> &srqns, const std::string &who) noexcept;
    // Every rank of the link's node died: its INI QP goes now and tick() completes what its queue held.
    void retire_dead_node(NodeLink &link) noexcept;
    // The TGT QP's creator of the connected `link` died (peer_died): the TGT QP lives only while a rank of its node
    // holds a handle on it, and such holders leave without a word (only a creator says LEAVING), so a fence at the
    // link's close, maybe much later, could find it gone and fail. From now on every send is signaled (its
    // completion retires it), and what was posted unsignaled before (inline sends) is retired now, while a holder
    // is there: by a fence toward the live rank the link goes through when a live rank of the node was sent a first
    // message on this connection (it holds, or is taking, a handle), else forgotten (it all went to the dead).
    void retire_unsignaled(NodeLink &link) noexcept;
    // Some live rank of the link's node holds its TGT QP: the rank asked to (HOLD) when it is the link's rank now, or
    // a rank that was sent a first message on this connection.
    bool live_rank_holds(const NodeLink &link) const noexcept;
    // The ranks that held the link's TGT QP all died (its creator and its holder at once): the QP went with them, and
    // what is posted on the link can never be acknowledged (it was all for them). Recorded here; done by tick()
    // (orphaned()): what is outstanding completes with an error, and what is queued goes over a new connection.
    void orphan(NodeLink &link) noexcept;
    void orphaned(NodeLink &link, std::uint32_t generation) noexcept;
    void to_idle(NodeLink &link) noexcept;
    // The link's peers' next SRQ messages are first messages of a new connection, and their eager rings are as
    // `ring` says.
    void restart_peers(NodeLink &link, RingAfter ring) noexcept;
    // A rank of the link's node other than its owner that is neither dead nor finalizing, or UINT32_MAX.
    std::uint32_t live_rank_of(const NodeLink &link) const noexcept;
    // Its owner died or said it is finalizing since: the next connection goes through another rank of the node
    // (live_rank_of), if there is one.
    void move_off_unusable_owner(NodeLink &link) noexcept;
    // Neither dead nor finalizing: a rank to connect through, or to hold a TGT QP.
    bool usable(std::uint32_t rank) const noexcept {
        return dead_ranks_.count(rank) == 0 && !finalized_ranks_->contains(rank);
    }
    // A request of ours to `rank` at `to` (its modex address: the token that proves we read it) about one
    // connection, naming `named` (ACCEPT, HOLD).
    static CmMessage request_to(CmType type, std::uint32_t rank, const PortAddress &to, std::uint32_t generation,
                                std::uint32_t ini_qpn, std::uint32_t tgt_qpn = 0,
                                std::uint32_t named = kCmNoRank) noexcept;
    // CLOSE sent once and not waited for: to a rank that may have left (only a handle's holder, or silent).
    void close_once(std::uint32_t rank, std::uint32_t generation, std::uint32_t ini_qpn,
                    std::uint32_t tgt_qpn) noexcept;
    void send_connect(NodeLink &link, std::uint64_t now) noexcept;
    void give_up(NodeLink &link, const std::string &why) noexcept;
    // The link's owner has been silent past rotate_after_us: the attempt goes through another live rank of the node
    // (true; it left the connecting list), or nobody else is there (false: the deadline decides).
    bool rotate_silent(NodeLink &link, std::uint64_t now) noexcept;
    void retract(NodeLink &link, std::uint32_t tgt_qpn) noexcept;
    void notice(std::uint32_t rank, std::uint32_t generation, std::uint32_t ini_qpn, std::uint32_t tgt_qpn) noexcept;
    void abandon(NodeLink &link) noexcept;
    void drop_ini(NodeLink &link) noexcept;
    void fail(NodeLink &link, const std::string &why) noexcept;
    void close(NodeLink &link) noexcept;
    void finish_close(NodeLink &link) noexcept;
    bool make_room() noexcept;
    void unlist(std::vector<NodeLink *> &list, NodeLink &link) noexcept;
    void send(const PortAddress &to, CmMessage message) noexcept;
    CmMessage reply_to(const CmMessage &request, CmType type) const noexcept;

    void on_connect(const CmMessage &m, const PortAddress &from) noexcept;
    void on_accept(const CmMessage &m, const PortAddress &from) noexcept;
    void on_reject(const CmMessage &m) noexcept;
    void on_close(const CmMessage &m, const PortAddress &from) noexcept;
    void on_close_ack(const CmMessage &m) noexcept;
    void on_probe(const CmMessage &m, const PortAddress &from) noexcept;
    void on_probe_ack(const CmMessage &m, const PortAddress &from) noexcept;
    // The link broke or could not connect (the path may be lost): its node is probed from now on, with backoff
    // (CmConfig::probe_broken_links; not for a dead node, a rail given up, or while finalizing). Under the mutex.
    void probe_later(NodeLink &link) noexcept;
    // Whether probing `link`'s node can still bring anything back (probe_later's rule, which send_probes keeps).
    bool worth_probing(const NodeLink &link) const noexcept {
        return config_.probe_broken_links && !link.node_dead_ && !abandoned_ && !finalizing_;
    }
    // The generation a PROBE about `link` names and its answer echoes (a link never connected has 0, which the
    // wire refuses).
    static std::uint32_t probe_generation(const NodeLink &link) noexcept {
        return std::max<std::uint32_t>(link.generation_, 1);
    }
    // tick() starts `link` over if it is still broken then (Deferred::Kind::revive), saying `why` it is usable.
    void revive_later(NodeLink &link, std::string why) noexcept;
    // The ADDRESS of this port's current LID for `rank` at `to`, which knows the port by `old_lid`.
    CmMessage address_to(std::uint32_t rank, const PortAddress &to, std::uint16_t old_lid) const noexcept;
    // ADDRESS again to `rank` (at `to`) if it never acknowledged this port's LID change (unheard_lids_): sent before
    // a PROBE to it, which it would drop otherwise.
    void tell_address_again(std::uint32_t rank, const PortAddress &to) noexcept;
    // Sends the due PROBEs of probing_ (the serving side); drops the links no longer worth probing.
    void send_probes(std::uint64_t now) noexcept;
    void on_leaving(const CmMessage &m) noexcept;
    void on_leaving_ack(const CmMessage &m) noexcept;
    void on_address(const CmMessage &m, const PortAddress &from) noexcept;
    void on_address_ack(const CmMessage &m) noexcept;
    // The holding protocol (cm_holder.cc).
    void on_hold(const CmMessage &m, const PortAddress &from) noexcept;
    void on_held(const CmMessage &m) noexcept;
    void on_release(const CmMessage &m, const PortAddress &from) noexcept;
    // RELEASE to every live node-mate: `t`'s initiator died (peer_died), drop your handle on it if you hold one.
    void release_node_mates(const OwnedTgt &t) noexcept;
    // A live node-mate to hold the TGT QP of `sender`'s connection, other than `not_this`; kCmNoRank if none.
    std::uint32_t choose_holder(std::uint32_t sender, std::uint32_t not_this) const noexcept;
    // Asks `t`'s holder, or ACCEPTs at once when there is nobody to ask.
    void ask_holder(OwnedTgt &t, std::uint64_t now) noexcept;
    void accept(OwnedTgt &t) noexcept;
    void resend_holds(std::uint64_t now) noexcept;
    // Handles opened on HOLD for `sender`'s connections older than `generation` (all of them: UINT32_MAX) go.
    void drop_held_handles(std::uint32_t sender, std::uint32_t generation) noexcept;
    void resend_addresses(std::uint64_t now) noexcept;
    void migrate_toward(std::uint64_t port, std::uint16_t old_lid, std::uint16_t new_lid) noexcept;
    void settle_leaving(NodeLink &link, std::uint64_t now) noexcept;
    void answer_leaving(NodeLink &link) noexcept;
    void ack_leaving(const NodeLink &link) noexcept;  // LEAVING_ACK for the link's connection
    // A live rank of the link's node other than its owner was sent a first message on this connection (so holds, or
    // is taking, a handle on the TGT QP).
    bool mate_holds(const NodeLink &link) const noexcept;
    // LEAVING is answered without a fence: what was posted unsignaled before is waited out (unfenced_retired).
    void answered_unfenced(NodeLink &link) noexcept;
    // The HCA's retry budget has passed, with the port up, since `link` answered LEAVING without a fence.
    bool unfenced_retired(const NodeLink &link, std::uint64_t now) const noexcept;
    void resend_leaving(std::uint64_t now) noexcept;
    std::string describe(const OwnedTgt &t) const;
    void resend_notices(std::uint64_t now) noexcept;

    static std::uint64_t key(std::uint32_t sender, std::uint32_t generation) noexcept {
        return (std::uint64_t(sender) << 32) | generation;
    }

    mutable std::mutex mutex_;
    // The serving side (a datagram, the retransmission timers: the service thread) waiting for mutex_: progress's
    // tick() steps aside meanwhile (ServingGuard).
    std::atomic<std::uint32_t> serving_waiting_{0};
    std::atomic<bool> due_{false};
    std::vector<Deferred> deferred_;
    std::vector<NodeLink *> to_start_;
    CmHost &host_;
    CmConfig config_;
    Counters uncounted_;  // until count_into() names the real ones
    Counters *counters_ = &uncounted_;
    std::uint32_t next_generation_ = 0;
    std::size_t live_ini_ = 0;
    bool finalizing_ = false;
    bool held_ = false;
    // The rail is given up for good (abandon).
    bool abandoned_ = false;
    // When the port last came back (resume).
    std::uint64_t resumed_at_us_ = 0;
    std::unordered_map<std::uint64_t, std::unique_ptr<NodeLink>> links_;  // by port_identity()
    std::vector<NodeLink *> connecting_, connected_, draining_, waiting_;
    std::size_t clock_hand_ = 0;
    OwnedTgts owned_;
    std::unordered_map<std::uint32_t, std::uint32_t> owned_qpns_;         // TGT QPN -> sender, for hold_tgt
    std::unordered_map<std::uint32_t, std::uint32_t> closed_generation_;  // by sender: newest generation closed
    OpenedTgts opened_;
    std::vector<CloseNotice> notices_;
    // ADDRESS to one rank, until it answers. `old_lid`: the LID that rank last heard of (an earlier change it has
    // not acknowledged keeps its own old LID, so that it still recognises the port).
    struct AddressNotice {
        std::uint32_t rank;
        std::uint16_t old_lid;
        std::uint32_t attempts;
        std::uint64_t next_retry_us;
        std::uint64_t retry_us;
        std::uint64_t deadline_us;
    };
    std::vector<AddressNotice> address_notices_;
    // Ranks whose ADDRESS was given up unanswered (their port may have been down meanwhile), with the LID they still
    // know this port by: they drop every datagram from the new LID, so a PROBE to one carries the ADDRESS again.
    // O(ranks told), emptied as they answer.
    std::unordered_map<std::uint32_t, std::uint16_t> unheard_lids_;
    std::uint16_t announced_lid_ = 0;       // this port's LID as last announced (0: never changed)
    std::uint32_t announcements_ = 0;       // ADDRESS generations
    std::vector<NodeLink *> leaving_;       // links whose creator said LEAVING, not answered yet
    std::vector<NodeLink *> probing_;       // broken links whose node is asked if it is back (queue_broke)
    std::size_t awaiting_leaving_ack_ = 0;  // owned TGT QPs told LEAVING, not answered yet
    std::size_t awaiting_held_ = 0;         // owned TGT QPs whose ACCEPT waits for HELD
    // Said they are finalizing (a refusal, LEAVING), here or on another rail (share_finalizing_ranks): not chosen
    // again, and while we finalize too, what is queued only for them is dropped.
    FinalizingRanks own_finalizing_;
    FinalizingRanks *finalized_ranks_ = &own_finalizing_;
    // Died (peer_died): never chosen, never waited for; their SRQs' numbers (what was posted to them before their
    // death was known comes back with the sends a refusal requeued).
    std::unordered_set<std::uint32_t> dead_ranks_;
    std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> dead_srqns_;  // by port_identity() of their node
    ConnectionManager *handle_keeper_ = nullptr;                                // null: handles are held here
    std::atomic<bool> *also_due_ = nullptr;                                     // raised with due_ (JobManagers::busy)
};

}  // namespace xrc
