// SPDX-License-Identifier: BSD-3-Clause
// What this transport does with each asynchronous event of the device, in one place, and the words of the message
// that names what the event hit: the port, or the QP with the connection and peer behind it. The BTL reads and
// acknowledges the events and does what the decision says, from progress context (so the upper layer's error
// callback is only ever called from there). Plain C++ over the event's type and what the port knows of the QP:
// unit-tested without a device.
//
// Policy (the full table, with the messages, is in docs/admin.md):
// - PORT_ERR for our port: hold new posts on the port (they queue, what is in flight stays: the HCA retransmits);
//   PORT_ACTIVE: resume. The job ends only when a work request fails or the port stays down past the grace.
// - LID_CHANGE, CLIENT_REREGISTER, SM_CHANGE, PKEY_CHANGE, GID_CHANGE for our port: re-query the port and log.
// - a port event for another port of the device: not ours (that port's module acts on it).
// - QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, PATH_MIG_ERR on a QP this port holds: the QP is in the error state, and
//   with it the path to a node (INI QP: the job ends, naming it) or a sender's path to this whole node (TGT QP:
//   released here, logged; the sender's own completion says what failed, and the sender decides: a request to a
//   process that died is refused so, which must not end a job that survives deaths). On a QP this port does not
//   hold (destroyed meanwhile, or another port's): logged.
// - LAST_WQE_REACHED on a TGT QP still in use: it entered the error state: released, as above (the loopback pair's:
//   the job ends). On a QP that is being closed or is unknown: expected, ignored.
// - DEVICE_FATAL: the device's rails are lost: with other rails that reach every peer of theirs, the traffic moves
//   there (what was in flight completes with an error and is sent again); otherwise the job ends.
// - CQ_ERR: the completion queue overran and discarded completions, receives among them that the sender's HCA saw
//   acknowledged (lost: nobody sends them again) and sends' completions (their owners never hear). Nothing says
//   which, so no rail failover can make up for it: the job ends, and during MPI_Finalize it counts as lost work.
// - SRQ_ERR: receives can no longer be trusted: the job ends.
// - SRQ_LIMIT_REACHED: re-arm the watermark. COMM_EST, SQ_DRAINED, PATH_MIG: ignored (counted).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

namespace xrc {

// Who a QP of this port belongs to, as the connection manager and the port know it.
struct QpRole {
    enum class Kind : std::uint8_t {
        unknown,       // not held by this port (destroyed since, or another port's)
        ini,           // our INI QP toward `node`, connected through rank `rank`'s TGT QP `peer_qpn`
        tgt_owned,     // a TGT QP we made for rank `rank`'s INI QP `peer_qpn` (connection generation `generation`)
        tgt_handle,    // our handle on a TGT QP another rank of this node made, for the INI QP `peer_qpn`
        loopback_ini,  // the on-node pair through the HCA's loopback
        loopback_tgt,
        cm_ud,  // the connection manager's UD QP
    };
    Kind kind = Kind::unknown;
    std::uint32_t node = 0;  // ini: the node; tgt_owned: the sender's node when known
    std::uint32_t rank = 0;  // ini: the rank the link goes through; tgt_owned: the sender
    std::uint32_t peer_qpn = 0;
    std::uint32_t generation = 0;
    bool closing = false;  // being drained or closed: errors and LAST_WQE are expected
};

enum class EventVerdict : std::uint8_t {
    ignore,       // counted, logged at high verbosity
    note,         // logged (verbosity 1): worth an admin's eye, no action
    hold,         // the port went down: hold new posts
    resume,       // the port is active again: post what was held
    requery,      // the port's attributes may have changed: query it and log
    rearm_srq,    // an SRQ hit its low watermark
    release_tgt,  // a remote sender's TGT QP (made or opened here) is in the error state: let it go, the sender decides
    lose_rail,    // the port's rail is lost: fail its traffic over to other rails if they reach every peer, else fatal
    fatal,        // end the job (the message says what broke), whatever other rails there are
};

struct EventSubject {
    ibv_event_type type = IBV_EVENT_COMM_EST;
    int port_num = 0;          // port events: element.port_num
    std::uint32_t qp_num = 0;  // QP events
    QpRole role;               // QP events: what the port knows of that QP
};

struct EventDecision {
    EventVerdict verdict = EventVerdict::ignore;
    // What happened, for the message: "QP_FATAL on INI QP 1234 toward node 3 (through rank 5, TGT QP 99)".
    // The caller adds host, device and port in front and the peer's host name when it knows it.
    std::string what;
    // The rank the event ties to (the INI QP's target rank, the TGT QP's sender), or UINT32_MAX.
    std::uint32_t peer_rank = UINT32_MAX;
    // The event itself means accepted work may have been lost without any completion saying so (CQ_ERR): during
    // MPI_Finalize too it is an error of its own (the process exits 1), not only the cause of failed completions.
    bool lost_work = false;
};

// What acting on an event needs of it, copied when it is read. The reader acknowledges every event at once (a QP
// or SRQ being destroyed waits for its events' acknowledgements), so by the time progress acts on it the objects
// the event pointed to may be gone: only numbers and pointers compared, never followed, are kept.
struct AsyncEventRecord {
    ibv_event_type type = IBV_EVENT_COMM_EST;
    std::uint8_t port_num = 0;    // port events
    std::uint32_t qp_num = 0;     // QP events (0: the event named no QP)
    const void *cq = nullptr;     // CQ events: compared with the port's CQ, never followed
    void *srq_context = nullptr;  // SRQ events: the SRQ's context (its RecvPool, which outlives the SRQ's events)
};
AsyncEventRecord record_event(const ibv_async_event &event) noexcept;

// The decision for one event seen by the module of port `my_port`.
EventDecision decide_event(const EventSubject &subject, std::uint8_t my_port);

// Whether an event's element is a port (event.element.port_num) / a QP (event.element.qp).
bool is_port_event(ibv_event_type type) noexcept;
bool is_qp_event(ibv_event_type type) noexcept;

// "INI QP 12 toward node 3 (through rank 5, TGT QP 99)", "TGT QP 99 made for rank 5's INI QP 12", ...
std::string describe_qp(std::uint32_t qp_num, const QpRole &role);

}  // namespace xrc
