// SPDX-License-Identifier: BSD-3-Clause
// What one process's module (one device port) counts: traffic by path, connections, receive-side events and
// registered memory. Each field is bumped where the code already is (the send paths touch the module anyway) by
// the thread that holds the lock of what it counts (the data path's, or a connection manager's mutex), and read
// by others (MPI_T, the status record) without it (class Count says how), so nothing per message beyond an add.
// Two writers under different locks could lose an increment, never tear one. The BTL publishes every
// field as an MPI_T performance variable btl_xrc_<name> (btl_xrc/btl_xrc_pvars.cc, summed over the process's
// ports); anything that connects or closes (the transport, a connection manager) bumps the same struct.
// Size: constant (one struct per module), whatever the job's size.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace xrc {

// One counter: a word one thread at a time writes and any thread may read. Bumped as a plain field (on x86-64
// one add to memory, which a relaxed atomic's load-add-store would triple, several times per message); read with
// a relaxed atomic load, so a reader sees an old or a new value, never a torn one (an aligned word). Under
// ThreadSanitizer the field is a std::atomic, so the tool checks who writes it without reporting every reader.
class Count {
public:
    Count() noexcept = default;
    Count(const Count &other) noexcept : value_(other.load()) {}
    Count &operator=(const Count &other) noexcept {
        store(other.load());
        return *this;
    }
    Count &operator=(std::uint64_t v) noexcept {
        store(v);
        return *this;
    }
    operator std::uint64_t() const noexcept { return load(); }
#if defined(__SANITIZE_THREAD__)
    std::uint64_t load() const noexcept {
        return value_.load(std::memory_order_relaxed);
    }
    Count &operator+=(std::uint64_t n) noexcept {
        store(load() + n);
        return *this;
    }
    Count &operator-=(std::uint64_t n) noexcept {
        store(load() - n);
        return *this;
    }
#else
    std::uint64_t load() const noexcept {
        return __atomic_load_n(&value_, __ATOMIC_RELAXED);
    }
    Count &operator+=(std::uint64_t n) noexcept {
        value_ += n;
        return *this;
    }
    Count &operator-=(std::uint64_t n) noexcept {
        value_ -= n;
        return *this;
    }
#endif
    Count &operator++() noexcept {
        return *this += 1;
    }
    Count &operator--() noexcept {
        return *this -= 1;
    }

private:
#if defined(__SANITIZE_THREAD__)
    void store(std::uint64_t v) noexcept {
        value_.store(v, std::memory_order_relaxed);
    }
    std::atomic<std::uint64_t> value_{0};
#else
    void store(std::uint64_t v) noexcept {
        __atomic_store_n(&value_, v, __ATOMIC_RELAXED);
    }
    alignas(8) std::uint64_t value_ = 0;
#endif
};

struct Counters {
    // Messages (sendi/send, ob1's headers and eager data), by path.
    Count ring_sends;             // RDMA-written into the peer's eager RDMA ring
    Count srq_sends;              // sent to one of the peer's SRQs
    Count srq_sends_ring_active;  // of those, to a peer whose ring we write into (full, or too large)
    Count ring_receives;          // read from the eager RDMA rings we granted
    Count srq_receives;           // received through our SRQs and handed up
    Count bytes_sent;             // message bytes handed to the BTL (header + payload)
    Count bytes_received;         // message bytes handed up
    Count credit_writes;          // RDMA writes of ring credits into a writer's credit word
    // One-sided (ob1's RGET/RPUT, osc/rdma).
    Count rdma_writes, rdma_bytes_written;
    Count rdma_reads, rdma_bytes_read;
    Count atomics;
    // Eager RDMA ring handshakes.
    Count eager_ring_requests;  // rings we asked peers for
    Count eager_rings_granted;  // rings we granted
    Count eager_rings_refused;  // requests we refused
    Count eager_rings_used;     // grants we received: we write into that peer's ring
    Count eager_ring_refusals;  // refusals we received: that peer stays on the SRQs
    // Eager RDMA rings paused by a connection that timed out (riding an outage) or broke (its rail came back later),
    // and written again.
    Count eager_ring_resumes_asked;    // writer: asked a peer to resume
    Count eager_rings_resumed;         // writer: the peer agreed, we write into its ring again
    Count eager_ring_resumes_agreed;   // reader: a writer's resume we agreed to
    Count eager_ring_resumes_refused;  // reader: a writer's resume we refused (the ring did not stand there)
    Count eager_ring_skips;            // reader: ring spans passed over for a copy delivered through the SRQs
    // Connections: an INI QP readied toward a node (the loopback pair for on-node peers included), or a TGT QP
    // through which a remote sender reaches us, readied (we own it) or opened (another local rank owns it).
    Count connections_opened;
    Count connections_closed;
    Count connections_open;  // opened - closed (a level: MPI_T counters only count from a handle's start)
    // The connection manager (connection_manager.h).
    Count connection_attempts;  // connections to a node started (CONNECT sent)
    Count connection_failures;  // connections that failed with sends waiting (reported as errors)
    Count evictions;            // connections closed to make room under btl_xrc_max_ini_qps
    Count reconnections;        // connections made again after a timeout (btl_xrc_outage_limit)
    Count ini_qps;              // INI QPs this process holds now (a level)
    Count ini_qps_peak;         // the most it held at once
    Count tgt_qps;              // TGT QPs this process made for remote initiators, held now
    Count tgt_handles;          // handles on TGT QPs other local ranks made, held now
    Count cm_datagrams_sent, cm_datagrams_received, cm_retransmissions;
    Count cm_rejected;    // malformed, foreign (job, token) or from a source that is not the sender's
    Count cm_duplicates;  // answered again or ignored: a retransmission crossed an answer
    Count cm_stale;       // for a connection that no longer exists
    Count cm_rotations;   // connection attempts moved to another rank of the node after the first one's silence
    // LID changes (LID_CHANGE, CLIENT_REREGISTER): ours announced, others' heard, QP paths moved for either.
    Count lid_changes;       // this port got a new LID: ADDRESS sent to the job
    Count peer_lid_changes;  // ADDRESS accepted: a peer port's stored addresses moved to its new LID
    Count paths_migrated;    // QPs moved to a path toward a new LID (INI, TGT, handles, loopback)
    // Receive side and device.
    Count srq_reposts;         // receive buffers posted back to an SRQ
    Count srq_limit_events;    // an SRQ fell to its low watermark (btl_xrc_receive_queues LOW)
    Count async_events;        // asynchronous events of the device, every kind
    Count rnr_retry_exceeded;  // sends given up after btl_xrc_rnr_retry RNR NAKs
    Count send_errors;         // send, RDMA or atomic completions with an error status
    Count port_downs;          // the port went down: new posts held
    Count port_ups;            // ... and came back: held posts resumed
    Count port_down_ms;        // milliseconds spent down (flaps that ended)
    Count failovers;           // peers this rail stopped reaching while another rail did
    Count failbacks;           // ... whose traffic came back to this rail once it reached them again
    Count failover_sends;      // sends that went over another rail instead (forwarded or sent again)
    Count replays_dropped;     // sent again after this rail's loss, but it had delivered them: dropped
    Count replays_delivered;   // sent again after this rail's loss, not delivered by it: handed up
    // Memory registered with the device (receive slabs, eager block, fragments, user buffers through the rcache).
    Count registered_bytes;
    Count registered_bytes_peak;
};

// Connections: bump through these, so the level stays opened - closed.
inline void count_connection_opened(Counters &c) noexcept {
    ++c.connections_opened;
    ++c.connections_open;
}
inline void count_connections_closed(Counters &c, std::uint64_t n) noexcept {
    c.connections_closed += n;
    c.connections_open -= n <= c.connections_open ? n : c.connections_open;
}

// Registrations come and go (the rcache evicts); the peak is kept as they happen, never per message.
inline void count_registration(Counters &c, std::size_t bytes) noexcept {
    c.registered_bytes += bytes;
    if (c.registered_bytes > c.registered_bytes_peak) c.registered_bytes_peak = c.registered_bytes;
}
inline void count_deregistration(Counters &c, std::size_t bytes) noexcept {
    c.registered_bytes -= bytes <= c.registered_bytes ? bytes : c.registered_bytes;
}

// How a counter behaves (the MPI_T class it is published as).
enum class CounterKind {
    Count,          // only grows: occurrences or bytes
    Level,          // goes up and down: a resource in use now
    HighWatermark,  // the largest level so far
};

struct CounterInfo {
    const char *name;
    Count Counters::*field;
    CounterKind kind;
    const char *description;
};

// Every counter, in one place: its name (btl_xrc_<name> in MPI_T and ompi_info), kind and description.
inline constexpr CounterInfo kCounterInfo[] = {
    {"ring_sends", &Counters::ring_sends, CounterKind::Count,
     "Messages sent by RDMA-writing them into the receiver's eager RDMA ring (no receive buffer, no completion at "
     "the receiver)"},
    {"srq_sends", &Counters::srq_sends, CounterKind::Count,
     "Messages sent through one of the receiver's XRC SRQs (peers without an eager RDMA ring, and messages that did "
     "not fit or found no room in one)"},
    {"srq_sends_ring_active", &Counters::srq_sends_ring_active, CounterKind::Count,
     "Of the SRQ sends, those to a peer whose eager RDMA ring this process writes into: the ring was full (no "
     "credit) or the message larger than a ring slot"},
    {"ring_receives", &Counters::ring_receives, CounterKind::Count,
     "Messages read from the eager RDMA rings this process granted"},
    {"srq_receives", &Counters::srq_receives, CounterKind::Count,
     "Messages received through this process's XRC SRQs and handed to the upper layer"},
    {"bytes_sent", &Counters::bytes_sent, CounterKind::Count,
     "Bytes of the messages sent (upper-layer header and payload, both paths; RDMA not included)"},
    {"bytes_received", &Counters::bytes_received, CounterKind::Count,
     "Bytes of the messages received and handed to the upper layer (both paths; RDMA not included)"},
    {"credit_writes", &Counters::credit_writes, CounterKind::Count,
     "RDMA writes returning eager RDMA ring credits to a writer that got none back on messages going its way "
     "(one-way traffic: at most one per half ring)"},
    {"rdma_writes", &Counters::rdma_writes, CounterKind::Count,
     "RDMA writes posted for the upper layer (ob1's RPUT, osc/rdma puts)"},
    {"rdma_bytes_written", &Counters::rdma_bytes_written, CounterKind::Count, "Bytes of those RDMA writes"},
    {"rdma_reads", &Counters::rdma_reads, CounterKind::Count,
     "RDMA reads posted for the upper layer (ob1's RGET of large messages, osc/rdma gets)"},
    {"rdma_bytes_read", &Counters::rdma_bytes_read, CounterKind::Count, "Bytes of those RDMA reads"},
    {"atomics", &Counters::atomics, CounterKind::Count,
     "Atomic operations posted (fetch-and-add, compare-and-swap; osc/rdma)"},
    {"eager_ring_requests", &Counters::eager_ring_requests, CounterKind::Count,
     "Eager RDMA rings this process asked peers for (after btl_xrc_eager_rdma_threshold sends to a peer)"},
    {"eager_rings_granted", &Counters::eager_rings_granted, CounterKind::Count,
     "Eager RDMA rings this process granted to peers (at most btl_xrc_max_eager_rdma)"},
    {"eager_rings_refused", &Counters::eager_rings_refused, CounterKind::Count,
     "Eager RDMA ring requests this process refused (all rings given, or eager RDMA off here)"},
    {"eager_rings_used", &Counters::eager_rings_used, CounterKind::Count,
     "Grants this process received: peers whose eager RDMA ring it writes into"},
    {"eager_ring_refusals", &Counters::eager_ring_refusals, CounterKind::Count,
     "Refusals this process received: peers it keeps sending to through their SRQs"},
    {"eager_ring_resumes_asked", &Counters::eager_ring_resumes_asked, CounterKind::Count,
     "Peers this process asked to write into their eager RDMA ring again after its connection to them timed out "
     "(riding an outage: btl_xrc_outage_limit) or broke (a rail that came back)"},
    {"eager_rings_resumed", &Counters::eager_rings_resumed, CounterKind::Count,
     "Peers that agreed: this process writes into their eager RDMA ring again"},
    {"eager_ring_resumes_agreed", &Counters::eager_ring_resumes_agreed, CounterKind::Count,
     "Writers this process let write into its eager RDMA ring again after their connection timed out or broke"},
    {"eager_ring_resumes_refused", &Counters::eager_ring_resumes_refused, CounterKind::Count,
     "Writers refused that (the ring did not stand where their writes stopped): they stay on the SRQs"},
    {"eager_ring_skips", &Counters::eager_ring_skips, CounterKind::Count,
     "Eager RDMA ring spans passed over because their message was delivered from a copy sent through the SRQs "
     "after its writer's connection timed out or broke"},
    {"connections_opened", &Counters::connections_opened, CounterKind::Count,
     "Connections brought up: an XRC INI QP connected to a node (plus the loopback pair for on-node peers when xrc "
     "carries on-node traffic), an XRC TGT QP made for a remote sender, or a handle opened on one another local "
     "rank made"},
    {"connections_closed", &Counters::connections_closed, CounterKind::Count,
     "Connections closed (INI QPs, TGT QPs and handles released): evictions, and at MPI_Finalize"},
    {"connections_open", &Counters::connections_open, CounterKind::Level,
     "Connections open now (opened minus closed): the ones MPI_Init made are here, while a counter handle "
     "allocated after MPI_Init counts only what happens after it"},
    {"connection_attempts", &Counters::connection_attempts, CounterKind::Count,
     "Connections to a node started by this process's connection manager (a CONNECT sent to a rank of the node): "
     "at the first message for the node (on demand), during MPI_Init (eager), back toward an initiator, or again "
     "after an eviction"},
    {"connection_failures", &Counters::connection_failures, CounterKind::Count,
     "Connections that could not be made while sends waited for them (no answer within btl_xrc_connect_timeout, "
     "refused, or no QP): each is reported as an error"},
    {"reconnections", &Counters::reconnections, CounterKind::Count,
     "Connections made again after the HCA gave up on their requests (port or path down past the retry budget): "
     "what was not acknowledged went out again over the new one, the receiver dropping what it had "
     "(btl_xrc_outage_limit)"},
    {"evictions", &Counters::evictions, CounterKind::Count,
     "Connections drained and closed (on both sides) to stay within btl_xrc_max_ini_qps; made again on their next "
     "use"},
    {"ini_qps", &Counters::ini_qps, CounterKind::Level,
     "XRC send (INI) QPs this process holds now: one per remote node it is connected or connecting to"},
    {"ini_qps_peak", &Counters::ini_qps_peak, CounterKind::HighWatermark,
     "The most XRC send (INI) QPs this process held at once (never above btl_xrc_max_ini_qps when it is set)"},
    {"tgt_qps", &Counters::tgt_qps, CounterKind::Level,
     "XRC receive (TGT) QPs this process made for remote senders and holds now (until they close the connection)"},
    {"tgt_handles", &Counters::tgt_handles, CounterKind::Level,
     "Handles this process holds on TGT QPs another local rank made (opened on the first message received through "
     "them)"},
    {"cm_datagrams_sent", &Counters::cm_datagrams_sent, CounterKind::Count,
     "Connection manager datagrams sent (CONNECT, ACCEPT, REJECT, CLOSE, CLOSE_ACK), retransmissions included"},
    {"cm_datagrams_received", &Counters::cm_datagrams_received, CounterKind::Count,
     "Connection manager datagrams received"},
    {"cm_retransmissions", &Counters::cm_retransmissions, CounterKind::Count,
     "CONNECT and CLOSE datagrams sent again because no answer came in time (lost datagrams, or a peer that was "
     "not calling MPI)"},
    {"cm_rejected", &Counters::cm_rejected, CounterKind::Count,
     "Datagrams dropped before anything was made: malformed, for another job, rank or port, with a wrong token, or "
     "from a UD address that is not the claimed sender's"},
    {"cm_duplicates", &Counters::cm_duplicates, CounterKind::Count,
     "Duplicate requests and answers (a retransmission crossed an answer): answered again with what was made, or "
     "ignored"},
    {"cm_stale", &Counters::cm_stale, CounterKind::Count,
     "Datagrams about a connection that no longer exists (a late copy of a closed one): ignored"},
    {"cm_rotations", &Counters::cm_rotations, CounterKind::Count,
     "Connection attempts moved to another rank of the node after the rank first asked had not answered for "
     "a quarter of btl_xrc_connect_timeout"},
    {"lid_changes", &Counters::lid_changes, CounterKind::Count,
     "Times this port got a new LID (LID_CHANGE or CLIENT_REREGISTER with a changed LID): the new address was "
     "announced to the job through the connection manager"},
    {"peer_lid_changes", &Counters::peer_lid_changes, CounterKind::Count,
     "Announcements accepted of a peer port's new LID: the stored addresses of that port were updated"},
    {"paths_migrated", &Counters::paths_migrated, CounterKind::Count,
     "QPs moved to a path toward a new LID (path migration: INI QPs, TGT QPs and handles toward a peer port that "
     "moved, and this port's loopback pair when it moved itself)"},
    {"srq_reposts", &Counters::srq_reposts, CounterKind::Count,
     "Receive buffers posted back to an SRQ after their message was handed up"},
    {"srq_limit_events", &Counters::srq_limit_events, CounterKind::Count,
     "SRQ limit events: an SRQ fell to its low watermark (the LOW of btl_xrc_receive_queues), the process was "
     "falling behind its senders"},
    {"async_events", &Counters::async_events, CounterKind::Count,
     "Asynchronous events the device reported to this process (every kind: SRQ limit, port, QP errors)"},
    {"rnr_retry_exceeded", &Counters::rnr_retry_exceeded, CounterKind::Count,
     "Sends that failed because the receiver had no buffer after btl_xrc_rnr_retry RNR NAKs (never with the "
     "default 7, which retries forever). Each RNR NAK itself is retried by the HCA and never reaches software: "
     "see the port counter hw_counters/rnr_nak_retry_err of the device (mlx5)"},
    {"send_errors", &Counters::send_errors, CounterKind::Count,
     "Send, RDMA and atomic completions with an error status (each ends the job with an error message)"},
    {"port_downs", &Counters::port_downs, CounterKind::Count,
     "Times the port went down (PORT_ERR): new sends were held, queued in order, while what was in flight was left "
     "to the HCA's retransmission"},
    {"port_ups", &Counters::port_ups, CounterKind::Count,
     "Times the port came back (PORT_ACTIVE) after going down: the held sends went out"},
    {"port_down_ms", &Counters::port_down_ms, CounterKind::Count,
     "Milliseconds the port spent down, over every flap that ended (see btl_xrc_port_down_grace)"},
    {"failovers", &Counters::failovers, CounterKind::Count,
     "Peers this port's rail stopped reaching (the port stayed down past btl_xrc_port_down_grace, the device failed, "
     "or sends toward the peer failed) while another rail of the process still reached them: their traffic went "
     "over that rail from then on"},
    {"failbacks", &Counters::failbacks, CounterKind::Count,
     "Peers whose traffic came back to this port's rail after it had gone over another one: the port came back "
     "after the rail was given up, or a connection request from the peer's node showed the path works again"},
    {"failover_sends", &Counters::failover_sends, CounterKind::Count,
     "Sends handed to this port's module that went over another rail instead: forwarded after the rail stopped "
     "reaching their peer, or sent again after they failed with it"},
    {"replays_dropped", &Counters::replays_dropped, CounterKind::Count,
     "Messages a peer sent again over another rail after this port's rail was lost, which this rail had delivered "
     "already (only their acknowledgements were lost): dropped, so that each message is delivered once"},
    {"replays_delivered", &Counters::replays_delivered, CounterKind::Count,
     "Messages a peer sent again over another rail after this port's rail was lost, which this rail had not "
     "delivered: handed up (with replays_dropped, every message in flight on the rail when it was lost)"},
    {"registered_bytes", &Counters::registered_bytes, CounterKind::Level,
     "Bytes of memory registered with the device now (receive slabs, eager RDMA block, send fragments, buffers "
     "registered for RDMA through the registration cache)"},
    {"registered_bytes_peak", &Counters::registered_bytes_peak, CounterKind::HighWatermark,
     "The most bytes of memory registered with the device at any time so far"},
};
// Every field described exactly once (a new field needs its line above).
consteval bool every_field_once() {
    for (std::size_t i = 0; i < std::size(kCounterInfo); ++i)
        for (std::size_t j = i + 1; j < std::size(kCounterInfo); ++j)
            if (kCounterInfo[i].field == kCounterInfo[j].field) return false;
    return std::size(kCounterInfo) * sizeof(std::uint64_t) == sizeof(Counters);
}
static_assert(every_field_once(), "every field of Counters is described once in kCounterInfo");

}  // namespace xrc
