// SPDX-License-Identifier: BSD-3-Clause
// Types of the xrc BTL component: the component (with its MCA parameters) and the module (one per usable
// device port). The transport itself lives in src/core; this layer maps BTL calls onto it.
#pragma once

#include "btl_xrc_ompi.h"

#include "src/core/async_event_policy.h"
#include "src/core/counters.h"
#include "src/core/eager_manager.h"
#include "src/core/failover.h"
#include "src/core/finalizing_ranks.h"
#include "src/core/params.h"
#include "src/core/peer_directory.h"
#include "src/core/registered_block.h"
#include "src/core/replay_filter.h"

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstdlib>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace xrc {
class NodeLink;
class PortTransport;
struct PortAddress;
struct SendOp;
class SendQueue;
}  // namespace xrc

// Everything the component knows about the job, built in btl_init (see btl_xrc_modex.cc).
struct mca_btl_xrc_job_t;

struct mca_btl_xrc_module_t;
using mca_btl_xrc_modules_t = std::vector<std::unique_ptr<mca_btl_xrc_module_t>>;

struct mca_btl_xrc_component_t {
    mca_btl_base_component_3_0_0_t super;  // must be first: Open MPI sees only this
    xrc::Params params;  // filled by the MCA variable system (storage registered in btl_xrc_params.cc)
    int output;          // opal_output stream, verbosity from btl_xrc_verbose
    // One module per usable port, in modex order, owned from btl_init to close: Open MPI holds pointers to their
    // `super` until it has finalized every BTL, and MPI_T may read their counters after that, so a module's memory
    // outlives its btl_finalize (which releases everything the module holds).
    mca_btl_xrc_modules_t modules;
    // MPI_THREAD_MULTIPLE: guards every module's data path (send queues, peers, eager rings, endpoint tables, the
    // counters they update). One for all of a process's rails, so that no thread ever waits for it while holding
    // another data-path lock: ob1's callbacks, fired under it from one module's progress, send on another module
    // (striping, a rail lost and its sends forwarded), which would otherwise take a second lock in either order.
    // Taken with OPAL_THREAD_LOCK, so free while opal_using_threads() is false. Recursive: those callbacks send
    // again. Progress only try-locks it (a thread that finds it taken leaves the completion queues to the holder).
    // Never held while a QP is made or readied: the connection manager makes them outside it (its own mutex comes
    // after this one). Made at component open, destroyed at close.
    opal_recursive_mutex_t lock;
    std::unique_ptr<mca_btl_xrc_job_t> job;
    // Progress calls until the status record is looked at again (btl_xrc_status.cc): 1 after a connection event.
    // Threads may all count down at once: relaxed loads and stores (plain moves, no locked instruction), so a tick
    // may be lost and the look comes a little later; the look itself is serialized in btl_xrc_status.cc.
    std::atomic<uint32_t> status_countdown;
    // Guards every module's adopting list (their peers directories have their own mutex): add_procs changes it
    // without the data-path lock (ob1 calls it holding its own, which a thread holding ours may be waiting for). A
    // leaf: held only around a look at or change of the list, never while calling out.
    std::mutex tables_mutex;
    // The ranks of this job known to be in their BTL finalize, learned on any rail (src/core/finalizing_ranks.h):
    // every module's home connection manager shares it. A leaf lock of its own.
    xrc::FinalizingRanks finalizing_ranks;

    // A process that exits without closing the component (MPI_Abort, exit() before MPI_Finalize) leaves its
    // modules to the kernel, as a process's verbs objects are: destroying them from a static destructor would call
    // into Open MPI and the verbs library while those are being torn down.
    ~mca_btl_xrc_component_t();
};

// What a peer's RDMA needs of a registration: our half (lkey) and the remote half (rkey).
struct mca_btl_base_registration_handle_t {
    uint32_t lkey;
    uint32_t rkey;
};

struct mca_btl_xrc_reg_t {
    mca_rcache_base_registration_t base;  // must be first: the rcache allocates and owns these
    struct ibv_mr *mr;
    mca_btl_base_registration_handle_t handle;
};

// Destroys a module's service record (btl_xrc_service.cc, where its type is complete): its thread is joined first.
struct mca_btl_xrc_service_delete {
    void operator()(struct mca_btl_xrc_service_t *service) const noexcept;
};

// One module per usable device port.
struct mca_btl_xrc_module_t {
    mca_btl_base_module_t super;  // must be first
    // The process's one data-path lock (the component's `lock`, shared by every module): see there.
    opal_recursive_mutex_t *lock;
    std::unique_ptr<xrc::PortTransport> transport;  // released at btl_finalize, after everything registered on it
    int index;                                      // this port's position in every process's modex address
    mca_rcache_base_module_t *rcache;
    opal_free_list_t eager_frags;  // send fragments of btl_eager_limit bytes
    opal_free_list_t max_frags;    // send fragments of btl_max_send_size bytes
    opal_free_list_t rdma_frags;   // put/get/atomic descriptors (no payload)
    bool lists_ready;
    bool wired;  // first add_procs done (eager mode: every node's connection started)
    // The finalize of a module of this process has begun (any module's: btl_xrc_module.cc, stop_calling_up). Open MPI
    // finalizes the BTL modules after the PML and osc that used them have closed and been unloaded, and the first
    // module's finalize progresses them all, so from here on no callback goes up from any module (a completion or
    // a message still arriving would call into unmapped code); queues still drain, errors are only logged.
    bool finalizing;
    // The receive callbacks by tag: Open MPI's table, and from finalize on an empty one, so that a message still
    // arriving finds no handler without a test of its own on the receive path.
    const mca_btl_active_message_callback_t *receive_callbacks;
    mca_btl_base_module_error_cb_fn_t error_cb;
    opal_event_t async_event;
    bool async_event_active;
    // The service thread and what it recorded for progress (btl_xrc_service.cc); null with btl_xrc_async_progress 0.
    std::unique_ptr<struct mca_btl_xrc_service_t, mca_btl_xrc_service_delete> service;
    // 8 registered bytes that non-fetching atomics write their (unused) result to.
    xrc::RegisteredBlock atomic_scratch;
    mca_btl_base_registration_handle_t atomic_scratch_handle;
    // Every endpoint this module made (freed at finalize), and the live ones of this job and of other jobs
    // (btl_xrc_other_jobs): del_procs removes them and clears their proc pointer (Open MPI may release the proc
    // after del_procs).
    xrc::PeerDirectory<struct mca_btl_base_endpoint_t> peers;
    // Listed by add_procs, their eager RDMA state not yet joined to the module's (mca_btl_xrc_adopt_endpoints).
    std::vector<struct mca_btl_base_endpoint_t *> adopting;
    // Eager RDMA: the rings this process grants and the handshake (btl_xrc_eager.cc maps it to ob1); off when
    // btl_xrc_use_eager_rdma is.
    xrc::EagerManager eager;
    // What the callbacks are handed for each granted ring's messages (btl_xrc_ompi_compat.h), one per ring the
    // manager may grant; null when eager RDMA is off.
    std::unique_ptr<mca_btl_xrc_ring_receive_t[]> ring_receives;
    // Progress calls in a row that found eager RDMA messages and skipped the completion queue.
    uint32_t cq_skips;
    // Traffic, connections, receive-side events, registered memory: MPI_T pvars (btl_xrc_pvars.cc), and the
    // summary at finalize (btl_xrc_verbose >= 10).
    xrc::Counters counters;
    // The port stayed down past btl_xrc_port_down_grace and that was reported: not again.
    bool port_failure_reported;
    // The last failed completion of this rail's send queues, in its report's words (the operation, status, QP and a
    // refusal's meaning), and the queue it broke: a send toward a peer of that queue that finds no other rail names
    // it (mca_btl_xrc_report_unreachable), however the send learns it (its own completion, or a post refused).
    char failed_completion[512];
    const xrc::SendQueue *failed_queue;
    // ... and no other rail carries this one's traffic, so it waits up to btl_xrc_outage_limit for the port (outages
    // ridden through); cleared when the port is back.
    std::atomic<bool> riding_outage;
    // mca_btl_xrc_rail_revivals() when the transport was last served: a rail that came back since takes the traffic
    // of this one's links (or of the whole rail) riding an outage (btl_xrc_progress.cc).
    uint32_t revivals_seen;
    // A thread is serving the transport's rare work (connections, recorded events, the port's grace): the others
    // skip it (btl_xrc_progress.cc).
    std::atomic<bool> serving;
    // With several rails: this rail was given up (port down past its grace, or the device failed) and its peers'
    // traffic goes over the others (btl_xrc_failover.cc), until its port is active again (mca_btl_xrc_rejoin_rail).
    std::atomic<bool> rail_lost;
    // The nodes toward which this rail was given up, each reported once (btl_xrc_failover.cc).
    xrc::LostNodes lost_nodes;
    // Several rails, failover on: the SRQ messages this process took off this rail, by connection (the ring's are
    // counted by the ring): what a copy sent again after the rail's loss is checked against.
    xrc::SourceCounts srq_taken;
    // Several rails: fragments whose completion progress owes ob1 (btl_xrc_failover.cc); under the lock.
    xrc::DeferredOps deferred;
    // Errors reported during finalize: operations accepted earlier that were not delivered. The process then
    // exits with a failure status (no upper layer is left to hear of them).
    uint32_t finalize_errors;
};

struct mca_btl_base_endpoint_t;

// The module behind the BTL interface Open MPI calls with (its `super`, first).
inline mca_btl_xrc_module_t *as_xrc(mca_btl_base_module_t *btl) noexcept {
    return reinterpret_cast<mca_btl_xrc_module_t *>(btl);
}

// OPAL_THREAD_LOCK for a scope: nothing while opal_using_threads() is false (it may turn true later: the unlock
// follows what the lock did).
class BtlXrcLock {
public:
    explicit BtlXrcLock(opal_recursive_mutex_t *mutex) noexcept
        : mutex_(OPAL_UNLIKELY(opal_using_threads()) ? mutex : nullptr) {
        if (mutex_ != nullptr) opal_mutex_lock(mutex_);
    }
    ~BtlXrcLock() {
        if (mutex_ != nullptr) opal_mutex_unlock(mutex_);
    }
    BtlXrcLock(const BtlXrcLock &) = delete;
    BtlXrcLock &operator=(const BtlXrcLock &) = delete;

private:
    opal_recursive_mutex_t *mutex_;
};

extern "C" {
extern mca_btl_xrc_component_t mca_btl_xrc_component;
}

// The function table and defaults every module starts from (the standard btl_xrc_* parameters write here).
extern mca_btl_base_module_t mca_btl_xrc_module_template;

// btl_xrc_module.cc
// The live endpoint of `rank` on `module`, or null (the tables' mutex around the look-up).
struct mca_btl_base_endpoint_t *mca_btl_xrc_endpoint_for(const mca_btl_xrc_module_t *module, uint32_t rank) noexcept;
// The module's endpoints, copied: every one made (`made`), or the live ones. For paths that act on each one (errors,
// a rail's loss); out of memory, it throws.
std::vector<struct mca_btl_base_endpoint_t *> mca_btl_xrc_endpoints_of(const mca_btl_xrc_module_t *module, bool made);
// The endpoints add_procs listed join the module's eager RDMA state, under the data-path lock (`locked`: the
// caller holds it; otherwise it is tried, and progress does it when another thread holds it).
void mca_btl_xrc_adopt_endpoints(mca_btl_xrc_module_t *module, bool locked) noexcept;
// threads: more than one thread may call the module's entry points (MPI_THREAD_MULTIPLE, progress threads).
int mca_btl_xrc_module_init(mca_btl_xrc_module_t *module, bool threads) noexcept;
// btl_xrc_failover.cc: with more than one module, one rail's loss is survived (docs/architecture.md, "Losing a rail").
// Chosen once at btl_init, when there is more than one module: the modules' sends become the variants that keep
// every posted fragment until its completion and forward what their rail no longer carries.
// With `outage` (btl_xrc_outage_limit; one module, or all of them): the same variants (also with one module), and
// what a timeout hands back (the port or path down past the retry budget) goes out again over the same rail's next
// connection when no other rail reaches that node (mca_btl_xrc_choose_outage_ride).
void mca_btl_xrc_failover_enable(mca_btl_xrc_module_t *module, bool threads, bool outage = false) noexcept;
// True when sends that time out are sent again over the same rail (mca_btl_xrc_failover_enable's `outage`).
bool mca_btl_xrc_outage_enabled() noexcept;
// A request on `queue` failed (progress, under the lock, before the queue takes the error): with several rails
// riding outages, a timeout breaks the connection (what it held goes over another rail, and the connection
// managers' probes bring the traffic back) when another rail still reaches its node, and is ridden through
// otherwise. Nothing with one rail or without the limit.
void mca_btl_xrc_choose_outage_ride(mca_btl_xrc_module_t *module, xrc::SendQueue &queue) noexcept;
// The module's rail no longer reaches `endpoint`'s peer: true when another rail does (the endpoint forwards to it
// from now on, and this is reported once per node), false when none does (the caller ends the job as before).
bool mca_btl_xrc_fail_over(mca_btl_xrc_module_t *module, struct mca_btl_base_endpoint_t *endpoint,
                           const char *why) noexcept;
// Another rail carries what `queue` carries: its node's peers (a link's queue) or this node's ranks (the loopback
// queue). False with one rail.
bool mca_btl_xrc_another_rail_serves(const mca_btl_xrc_module_t *module, const xrc::SendQueue &queue) noexcept;
// No rail reaches `endpoint`'s peer (mca_btl_xrc_fail_over was false), whose requests went through `queue`: the job
// ends, the message saying `what` failed and, when this rail saw the failed completion that broke `queue`, that
// completion's report. `endpoint` may be null (a request that names no peer).
void mca_btl_xrc_report_unreachable(mca_btl_xrc_module_t *module, struct mca_btl_base_endpoint_t *endpoint,
                                    const xrc::SendQueue *queue, const char *what) noexcept;
// The same for a request of `queue` that failed with `status`: "a send failed (status) and no other rail reaches
// this peer", then the completion's report.
void mca_btl_xrc_report_no_other_rail(mca_btl_xrc_module_t *module, struct mca_btl_base_endpoint_t *endpoint,
                                      const xrc::SendQueue *queue, ibv_wc_status status) noexcept;
// The whole rail is lost (port down past its grace, device fatal): true when every peer it reaches is reached by
// another rail; then everything queued or in flight on it is failed, and sent again over the other rails.
bool mca_btl_xrc_lose_rail(mca_btl_xrc_module_t *module, const char *why) noexcept;
// True when the module's sends are the failover variants (more than one module).
bool mca_btl_xrc_failover_enabled() noexcept;
// The port of a rail given up is active again: its connection managers make connections again and every peer's
// traffic comes back to it (failback). True when the rail was given up and is back. Progress.
bool mca_btl_xrc_rejoin_rail(mca_btl_xrc_module_t *module) noexcept;
// How many times a rail or a link of any module came back (rejoin, failback): a rail riding an outage hands its
// traffic over when this changes. Any thread.
uint32_t mca_btl_xrc_rail_revivals() noexcept;
// Serving the module's transport, after another rail came back (mca_btl_xrc_rail_revivals changed): its links
// riding an outage toward nodes that rail reaches hand their traffic over (xrc::ConnectionManager::
// hand_over_riding). Nothing with one rail or without the limit.
void mca_btl_xrc_hand_over_riding(mca_btl_xrc_module_t *module) noexcept;
// A link of the module connects again after it failed (xrc::PortTransport::Listener::link_revived): the endpoints
// behind it stop forwarding. Progress, under the data-path lock.
void mca_btl_xrc_link_revived(mca_btl_xrc_module_t *module, const xrc::NodeLink &link) noexcept;
// Progress, from the transport's rare work (it raised the module busy): the completions owed to ob1, and the
// counts of connections their senders closed. Takes the lock.
void mca_btl_xrc_failover_serve(mca_btl_xrc_module_t *module) noexcept;
// Finalize, before the fragment lists go: what is still owed is returned (ob1 is gone, nobody is called).
void mca_btl_xrc_failover_fini(mca_btl_xrc_module_t *module) noexcept;

// btl_xrc_peer_death.cc: a process of the job dies and the job goes on (User-Level Failure Mitigation).
// At btl_init, before the transports are made: whether the job runs with ULFM, and if so the runtime's word of a
// death is watched for.
void mca_btl_xrc_ft_init() noexcept;
void mca_btl_xrc_ft_fini() noexcept;
bool mca_btl_xrc_ft_enabled() noexcept;
// Rank `rank` of this job died: its endpoints on every module send nothing more, what was queued for it fails, its
// connections and TGT QPs go. `why`: how the BTL found out (then ob1 is told, as a non-fatal failure of that
// process), or null when the runtime said so (ob1 heard it too). Progress context; once per rank.
void mca_btl_xrc_peer_died(uint32_t rank, const char *why) noexcept;
// Progress: the deaths the runtime reported since the last call are acted on.
void mca_btl_xrc_ft_serve() noexcept;

// btl_xrc_progress.cc
// One progress call over every module not finalized yet (finalize and flush wait on the module's work with it;
// with several rails what a module waits for may be another's to complete).
int mca_btl_xrc_progress_module(mca_btl_xrc_module_t *module) noexcept;
// Polls the module's rings and completion queue until they are empty (or a bound): what the HCA has already
// completed is retired before a rail is given up (btl_xrc_failover.cc). Progress context, outside its poll loop.
void mca_btl_xrc_drain_completions(mca_btl_xrc_module_t *module) noexcept;
// One poll of the module's rings and completion queue (counting sources when failover is on), under the lock:
// returns what it handled.
int mca_btl_xrc_poll_module(mca_btl_xrc_module_t *module) noexcept;
// btl_progress, every module and the status record: chosen once at btl_init, as the sends are (the locked one
// try-locks each module, the other never looks at a lock or at opal_using_threads()).
int mca_btl_xrc_progress_unlocked() noexcept;
int mca_btl_xrc_progress_locked() noexcept;
// The same, counting every SRQ message's source (several rails, failover on: btl_xrc_failover.cc).
int mca_btl_xrc_progress_counting_unlocked() noexcept;
int mca_btl_xrc_progress_counting_locked() noexcept;
void mca_btl_xrc_report_error(mca_btl_xrc_module_t *module, struct mca_btl_base_endpoint_t *endpoint,
                              const char *what) noexcept;
// Does what one asynchronous event of the device calls for (src/core/async_event_policy.h decides), on the module
// the event is about (several ports of one device share a context, and so an async fd). Progress context only: a
// fatal event calls the upper layer's error callback.
void mca_btl_xrc_act_on_event(mca_btl_xrc_module_t *module, const xrc::AsyncEventRecord &event) noexcept;
// The device's word before a port's grace ends the job: when the port is active although its PORT_ACTIVE was not
// acted on (lost, or read too late), it is acted on as that event would have been. True when the port is up.
bool mca_btl_xrc_resume_if_port_active(mca_btl_xrc_module_t *module) noexcept;
// A connection failed (its sends have completed with an error): reported with the rank it went through.
void mca_btl_xrc_report_link_failure(mca_btl_xrc_module_t *module, const xrc::NodeLink *link,
                                     const std::string &why) noexcept;
// What one asynchronous event of the device means to the module (progress context: may report an error).
void mca_btl_xrc_async_event(mca_btl_xrc_module_t *module, const xrc::AsyncEventRecord &event) noexcept;

// btl_xrc_service.cc: with btl_xrc_async_progress, a thread per module sleeps on the connection manager's
// completion channel and the device's async fd, answers CONNECT and CLOSE, runs the manager's retransmissions,
// and records async events; it never calls up into Open MPI. Progress does the rest (service_progress).
int mca_btl_xrc_service_start(mca_btl_xrc_module_t *module) noexcept;
void mca_btl_xrc_service_stop(mca_btl_xrc_module_t *module) noexcept;
// Progress: acts on the async events the thread recorded.
void mca_btl_xrc_service_progress(mca_btl_xrc_module_t *module) noexcept;

// btl_xrc_status.cc: this process's status record (src/core/status_record.h), read by xrc-status. Written when
// the first modules exist, at the end of the progress call after a connection event, every btl_xrc_status_interval
// seconds, and removed when the last module finalizes.
void mca_btl_xrc_status_init(const mca_btl_xrc_modules_t &modules, const std::string &dir,
                             const std::string &job_name) noexcept;
void mca_btl_xrc_status_changed() noexcept;  // the transports' listener hook: a connection event
void mca_btl_xrc_status_poll() noexcept;
void mca_btl_xrc_status_module_done(mca_btl_xrc_module_t *module) noexcept;  // before its transport goes
void mca_btl_xrc_status_fini() noexcept;
// Once per progress call: a decrement, and a look at the record every so many calls or after an event.
inline void mca_btl_xrc_status_tick() noexcept {
    auto &countdown = mca_btl_xrc_component.status_countdown;
    const uint32_t left = countdown.load(std::memory_order_relaxed) - 1;
    countdown.store(left, std::memory_order_relaxed);
    if (OPAL_UNLIKELY(left == 0)) mca_btl_xrc_status_poll();
}

// btl_xrc_pvars.cc
int mca_btl_xrc_register_pvars() noexcept;
void mca_btl_xrc_report_counters(const mca_btl_xrc_module_t *module) noexcept;  // btl_xrc_verbose >= 10

// btl_xrc_params.cc
int mca_btl_xrc_register_params() noexcept;
// OPAL_SUCCESS, or a help message was shown for each invalid value. Out of memory, it throws (btl_init catches).
int mca_btl_xrc_validate_params();
// Whether the job cannot do without xrc, from the btl list and the job's size (xrc::xrc_required says when).
bool mca_btl_xrc_explicitly_requested() noexcept;

// btl_xrc_help.cc
void mca_btl_xrc_add_help_dir() noexcept;
inline constexpr const char *kBtlXrcHelpFile = "help-mpi-btl-xrc.txt";
// Shows one of our help messages. Rendered with opal_show_help_string from our help file and written to stderr
// by local rank 0 only (every rank of a node sees the same configuration). Not opal_show_help, because in Open MPI
// 4.1.4 with PMIx 4.2 a help message an MPI process sends during MPI_Init (before the modex fence) travels through
// PMIx_Log and is often lost: mpirun prints "ORTE_ERROR_LOG: Data unpack would read past end of buffer in file
// orte/util/show_help.c" instead, in a fair share of two-rank runs (docs/benchmarks.md, "Figures behind constants in
// the code").
void mca_btl_xrc_show_help(const char *topic, ...) noexcept;

// What an Open MPI or PMIx call allocated with malloc and handed over (strings, modex blobs): freed once, here.
struct mca_btl_xrc_free_t {
    void operator()(void *p) const noexcept { std::free(p); }
};
template <class T>
using mca_btl_xrc_malloced_t = std::unique_ptr<T, mca_btl_xrc_free_t>;

#define BTL_XRC_VERBOSE(level, ...) opal_output_verbose((level), mca_btl_xrc_component.output, __VA_ARGS__)
