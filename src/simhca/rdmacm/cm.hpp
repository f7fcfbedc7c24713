// SPDX-License-Identifier: BSD-3-Clause
// Internal state of the software HCA's librdmacm: event channels, CM ids and the connection-manager
// thread. One process-wide mutex guards all of it (CM operations are rare; simplicity wins), and one
// condition variable wakes every waiter (sync operations, destroy waiting for acks).
#pragma once

#include "cm_abi.hpp"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

namespace simhca_cm {

struct Id;

// An event as the application sees it, plus the bytes its private data points to.
struct Event {
    rdma_cm_event ev{};
    std::vector<uint8_t> private_data;
    Id *owner = nullptr;        // the id the event reports on (ev.id)
    Id *listen_owner = nullptr; // CONNECT_REQUEST: the listening id
};

// rdma_event_channel: fd is one end of a socketpair that holds one byte per queued event, so poll() and
// blocking reads behave as on /dev/infiniband/rdma_cm; the events themselves wait in `queue`.
struct Channel {
    rdma_event_channel pub{};
    int writer = -1;
    std::deque<std::unique_ptr<Event>> queue;
};

enum class State { Idle, Incoming, Bound, AddrResolved, RouteResolved, Listening, Connecting, ReqReceived,
                   Accepted, RepReceived, Connected, Disconnected, Rejected, Destroying };

// What the peer told us in the connection exchange.
struct PeerInfo {
    uint32_t qpn = 0, psn = 0, qkey = 0;
    uint16_t lid = 0;
    ibv_gid gid{};
    uint8_t responder_resources = 0, initiator_depth = 0, retry_count = 7, rnr_retry_count = 7, srq = 0;
};

struct Multicast {
    sockaddr_storage addr{};
    ibv_gid mgid{};
    uint16_t mlid = 0;
    bool attached = false;
};

// cma_id_private: the public rdma_cm_id comes first, so an rdma_cm_id* is also an Id*.
struct Id {
    rdma_cm_id pub{};
    State state = State::Idle;
    Channel *channel = nullptr;
    bool sync = false;           // created without a channel (rdma_create_ep / get_request): owns `channel`
    int sock = -1;               // bound / listening / connection TCP socket (the RDMA port = its port)
    std::vector<uint8_t> rx;     // partial frames read from `sock`
    bool connecting_tcp = false; // non-blocking connect in progress
    uint32_t psn = 0;
    PeerInfo peer;
    rdma_conn_param my_conn{};   // what connect/accept asked for (private data copied below)
    std::vector<uint8_t> my_private;
    int events_out = 0;          // retrieved with rdma_get_cm_event, not yet acked
    bool handed_out = false;     // an event of this id reached the application (a child is its own then)
    uint8_t ack_timeout = 14;    // RDMA_OPTION_ID_ACK_TIMEOUT (4.096us * 2^14 = 67 ms by default)
    bool ack_timeout_set = false;
    uint8_t tos = 0;
    bool created_cqs = false;    // rdma_create_qp made send/recv CQs (and destroys them)
    ibv_sa_path_rec path{};
    std::vector<Multicast> mcast;
    // rdma_create_ep(RAI_PASSIVE) remembers the QP to create on each request (rdma_get_request).
    bool has_ep_qp_attr = false;
    ibv_qp_init_attr ep_qp_attr{};
    ibv_pd *ep_pd = nullptr;
    ibv_ece local_ece{}, remote_ece{};
    bool peer_known = false;     // the exchange delivered the peer's QPN/PSN/LID
    bool passive = false;        // created by a listener for an incoming request
    Id *listener = nullptr;      // a passive child: the listening id that accepted it
};

// Process-wide state.
struct Global {
    std::mutex mu;
    std::condition_variable cv;
    std::list<Id *> ids;
    ibv_context *verbs = nullptr; // simhca0, opened on first use (one device per node)
    ibv_pd *pd = nullptr;         // the device's default PD (librdmacm's cma_dev->pd)
    uint16_t lid = 0;
    ibv_gid gid{};
    enum ibv_mtu mtu = IBV_MTU_1024;
    int epoll = -1;
    int wake = -1;                // eventfd that makes the CM thread re-read its work
    bool thread_running = false;
    uint8_t max_rd_atomic = 1;    // device limits, the default responder resources / initiator depth
};
Global &global() noexcept;

// Device: open simhca0 once (caller holds the mutex). 0 or an errno value.
int ensure_device() noexcept;
// Bind the id to the device (verbs, pd, port, sgid, pkey) after an address was chosen.
int attach_device(Id &id) noexcept;

// Events (caller holds the mutex).
std::unique_ptr<Event> make_event(Id &id, rdma_cm_event_type type, int status = 0) noexcept;
void queue_event(Channel &ch, std::unique_ptr<Event> ev) noexcept;
void drop_events_of(Id &id) noexcept;
// Sync ids: wait for the next event on the id's private channel and keep it in id->event (librdmacm's
// ucma_complete). Returns 0, or -1 with errno (ECONNREFUSED when the event is an error event).
int complete_sync(std::unique_lock<std::mutex> &lk, Id &id) noexcept;
Channel *new_channel() noexcept;
void free_channel(Channel *ch) noexcept;

// The id's QP is connected (RC): the CM exchange is REQ/REP/RTU and a refusal is a REJ; otherwise (UD) it is
// a SIDR lookup, answered or refused by a SIDR REP.
inline bool connected_ps(const Id &id) noexcept { return id.pub.qp_type == IBV_QPT_RC; }

// Sends a REJ with `status` and the private data `data` (`len` bytes, may be null), closes the id's socket;
// the id is then Rejected. 0 or the errno value of the send.
int send_reject(Id &id, const void *data, uint8_t len, int status) noexcept;

// A connect attempt failed with errno value `err` (0: the peer closed before answering): the event the IB CM
// would report (REJECTED / UNREACHABLE with its reason).
void report_connect_failure(Id &id, int err) noexcept;

// CM thread: watch `id.sock` (caller holds the mutex).
int watch(Id &id, bool want_write) noexcept;
void unwatch(Id &id) noexcept;

// QP transitions that the CM performs on an id's QP. 0 or errno value.
int qp_to_init(Id &id, ibv_qp *qp) noexcept;
int qp_to_rtr(Id &id, ibv_qp *qp) noexcept;
int qp_to_rts(Id &id, ibv_qp *qp) noexcept;
int qp_to_err(ibv_qp *qp) noexcept;
int fill_init_qp_attr(Id &id, ibv_qp_attr &attr, int &mask) noexcept;
void fill_ud_ah(Id &id, ibv_ah_attr &ah) noexcept;

// Bind an Idle id to addr (reserves the port; a specific address picks the device). 0 or errno value.
int bind_id(Id &id, const sockaddr *addr) noexcept;
// rdma_destroy_id with the mutex held (it waits for acks, so it needs the lock object).
int destroy_locked(Id *id, std::unique_lock<std::mutex> &lk) noexcept;

// Address helpers.
socklen_t addr_len(const sockaddr *sa) noexcept;
bool is_wildcard(const sockaddr *sa) noexcept;
uint16_t port_of(const sockaddr *sa) noexcept; // host order

// errno-style return for C callers.
inline int fail(int err) noexcept { errno = err; return -1; }

} // namespace simhca_cm
