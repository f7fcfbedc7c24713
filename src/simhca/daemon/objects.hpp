// SPDX-License-Identifier: BSD-3-Clause
// The objects the daemon owns on behalf of its clients (what the adapter
// and the kernel own on real hardware). Ids are daemon-wide; every request
// is checked against the owner so one process cannot touch another's.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include <infiniband/verbs.h>

#include "../common/shm_layout.hpp"
#include "../common/unique_fd.hpp"
#include "shm_region.hpp"
#include "tag_matching.hpp"

namespace simhca {

struct Client {
    uint32_t id = 0;
    UniqueFd sock;
    pid_t pid = 0;
    uid_t uid = 0;
    UniqueFd async_rd, async_wr;  // rd is handed to the library
    UniqueFd doorbell;            // eventfd the library writes after posting
    bool is_ctl = false;          // simhca-ctl connection: no verbs objects
    uint32_t device = 0;          // the device (simhcaN) the context was opened on
    std::vector<uint32_t> qpns;   // QPs it owns (the doorbell scans only these)
    uint64_t secret = 0;          // proves a Join comes from this context's process tree
    uint32_t alias_of = 0;        // a forked child's or an importer's connection: acts as this client
    // Autobound abstract name of the library's end of `sock`: a socket passed back to us (ImportDevice)
    // names its own end, so this is how the daemon recognises whose context the passed fd is.
    std::string sock_name;
};

struct Pd {
    uint32_t id;
    Client *owner;
    int users = 0;  // MRs, QPs, SRQs
};

struct Mr {
    uint32_t id;
    Client *owner;
    uint32_t pd;
    uint64_t addr, length, iova;
    int access;
    uint32_t key;     // lkey == rkey
    pid_t pid = 0;    // process whose memory it is (the registering connection's: an importer's is its own)
    int windows = 0;  // MWs bound to it (dereg is EBUSY meanwhile)
    // Device memory MRs: `addr` is an address in the daemon's own mapping of
    // the DM region (zero-based iova = offset), copied with memcpy.
    bool local = false;
    uint32_t dm = 0;
};

// Device memory: a memfd both the daemon and the owning library map.
struct Dm {
    uint32_t id;
    Client *owner;
    ShmRegion shm;
    size_t length = 0;
    int users = 0;  // MRs on it
};

// A memory window: a remote key for a sub-range of an MR, bound and
// invalidated by work requests. Type 2 windows are bound to one QP.
struct Mw {
    uint32_t id;
    Client *owner;
    uint32_t pd;
    int type;  // 1 or 2
    uint32_t key;
    bool bound = false;
    uint32_t mr = 0;  // MR id
    uint64_t addr = 0, length = 0;
    int access = 0;
    uint32_t qpn = 0;  // type 2: the QP it was bound through
};

struct Channel {
    uint32_t id;
    Client *owner;
    UniqueFd rd, wr;
    int users = 0;
};

struct Cq {
    uint32_t id;
    Client *owner;
    uint32_t channel = 0;
    uint64_t cookie = 0;
    ShmRegion shm;
    uint32_t entries = 0;
    uint32_t head = 0;  // daemon's producer index
    shm::CqCtl *ctl = nullptr;
    shm::Cqe *ring = nullptr;
    int users = 0;
    uint32_t comp_events = 0, async_events = 0;
    bool overflowed = false;
};

struct Xrcd {
    uint32_t id;
    bool has_inode = false;
    dev_t dev = 0;
    ino_t ino = 0;
    int usecnt = 0;  // open handles + SRQs + TGT QPs, like the kernel's xrcd->usecnt
};

struct XrcdHandle {
    uint32_t id;
    Client *owner;
    uint32_t xrcd;
};

struct Srq {
    uint32_t id;
    Client *owner;
    ibv_srq_type type = IBV_SRQT_BASIC;
    uint32_t pd = 0, xrcd = 0, cq = 0;
    uint32_t srqn = 0;
    uint64_t cookie = 0;
    ShmRegion shm;
    uint32_t entries = 0, max_sge = 0, max_wr = 0;
    uint32_t limit = 0;  // armed when non-zero
    shm::SrqCtl *ctl = nullptr;
    shm::RecvWqe *ring = nullptr;
    int users = 0;  // QPs attached
    uint32_t async_events = 0;
    std::unique_ptr<TagMatching> tm;  // IBV_SRQT_TM only
};

struct QpHandle {
    uint32_t id;
    Client *owner;
    uint32_t qpn;
    uint64_t cookie;
    uint32_t async_events = 0;
};

struct Qp {
    uint32_t qpn;
    Client *owner = nullptr;  // nullptr for XRC TGT QPs: they live in the XRCD
    ibv_qp_type type;
    uint32_t pd = 0, send_cq = 0, recv_cq = 0, srq = 0, xrcd = 0;
    bool sq_sig_all = false;
    ibv_qp_cap cap{};
    ibv_qp_state state = IBV_QPS_RESET;
    ibv_qp_attr attr{};  // current attributes (what query_qp returns)
    uint32_t rail = 0;   // index into ObjectTable::ports: its device's port attr.port_num
    ShmRegion shm;
    uint32_t sq_entries = 0, rq_entries = 0;
    uint32_t sq_seen = 0;  // producer index at the last rescan (Doorbells::going_to_sleep)
    shm::QpCtl *ctl = nullptr;
    shm::SendWqe *sq = nullptr;
    shm::RecvWqe *rq = nullptr;
    std::deque<shm::SendWqe> pending;  // consumed from the ring, not yet completed
    // Retry machinery (RNR NAK and transport timeouts).
    uint64_t retry_at_ns = 0;  // 0 = not waiting
    int rnr_left = 0, retry_left = 0;
    bool counters_loaded = false;
    std::vector<uint32_t> handles;  // QpHandle ids
    bool last_wqe_sent = false;
    // Fault injection (simhca-ctl fault misroute / bad-rkey): the next work request of that kind posted on this
    // requester carries a wrong XRC SRQ number / an rkey nobody has, as a buggy or stale sender would send it.
    bool has_alt_path = false;  // an alternate path is loaded (IBV_QP_ALT_PATH) and not yet migrated to
    enum class Forge : uint8_t { none, misroute, bad_rkey };
    Forge forge = Forge::none;
    uint32_t forge_srqn = 0;
    // Requester, remote peer: a window of requests on the wire, replies in
    // order (like RC PSNs). pending[0..sent) are in flight; tokens[i] and
    // bytes[i] belong to pending[i]. `stream` names this connection epoch,
    // head_seq is the sequence number of pending.front().
    uint64_t stream = 0, head_seq = 0;
    uint32_t sent = 0;
    std::deque<uint64_t> tokens;
    std::deque<size_t> sent_bytes;
    uint64_t ack_due_ns = 0;  // reply for the head expected by then
    // Responder: next expected sequence of the peer's stream and the answers
    // of the last executed requests, replayed for retransmitted duplicates.
    uint64_t rstream = 0, expected = 0;
    struct Replay {
        uint64_t seq = ~0ull;
        int status = 0;
        uint8_t rnr = 0;
        std::vector<uint8_t> data;
    };
    std::vector<Replay> replay;
};

}  // namespace simhca
