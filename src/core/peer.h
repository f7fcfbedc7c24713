// SPDX-License-Identifier: BSD-3-Clause
// Everything one process decides about sending to one peer process, in one place: where its messages go (its
// SRQs, the send queue toward its node), whether a message takes the peer's eager RDMA ring or the SRQ path and
// how the work request looks, the ring set-up handshake's state, and the first-message flag that tells the peer
// to hold its own handle on the TGT QP a new connection reaches it through. The BTL endpoint embeds one; the BTL
// send path calls prepare() once and posts what it filled in.
#pragma once

#include "address.h"
#include "eager_rdma.h"
#include "replay_filter.h"
#include "send_queue.h"
#include "wire_format.h"

#include <arpa/inet.h>

#include <cstdint>
#include <vector>

namespace xrc {

class NodeLink;

enum class EagerState : std::uint8_t {
    counting,   // counting SRQ sends toward the threshold
    requested,  // asked the peer for a ring
    active,     // writing into the peer's ring
    off,        // refused, or eager RDMA is off
    // Writing paused: the connection timed out or broke, and copies of what the ring did not acknowledge are being
    // sent through the SRQs (or over another rail)...
    paused,
    resume_due,  // ...and are queued: the next SRQ send asks the peer to resume (it goes after them)...
    resuming,    // ...and until the peer answers, messages take the SRQs
};

// What becomes of the writes into the peer's ring when the connection changes (Peer::next_connection).
enum class RingAfter : std::uint8_t {
    kept,  // a refusal: the ring is written on through the next connection (what the peer refused was an SRQ's)
    // a timeout riding an outage, or a broken connection whose rail came back: paused until the peer, having judged
    // every copy, agrees where the writes stopped
    paused,
    stopped  // for good: the processes behind the connection went away, or an on-node peer moved back to its rail
};

class Peer {
public:
    std::uint32_t rank = 0;
    std::vector<SrqEntry> srqs;  // the peer's SRQs, ascending buffer size
    SendQueue *queue = nullptr;  // toward the peer's node (never null once attached)
    NodeLink *link = nullptr;    // the connection to the peer's node; null for on-node peers (HCA loopback)
    // Flags for the next SRQ message's immediate data: kImmFirst from the start of every connection of the link
    // until the first SRQ message to this peer is prepared on it.
    std::uint32_t imm_flags = 0;

    EagerChannel eager;            // toward the peer's ring, once granted
    EagerRing *granted = nullptr;  // the ring this process granted the peer: our messages carry its consumed count
    EagerState eager_state = EagerState::off;
    std::uint32_t eager_sends = 0;  // SRQ sends so far while counting
    std::uint32_t eager_word = 0;   // index of our credit word while requested/active
    // Several rails: the positions of the sends kept for replay toward this peer on this rail (replay_filter.h).
    SendStreams streams;

    // The SRQ number of the smallest class that holds `bytes`, 0 if none does.
    std::uint32_t srq_for(std::size_t bytes) const noexcept {
        for (const auto &s : srqs)
            if (s.buffer_size >= bytes) return s.srq_num;
        return 0;
    }

    // Fills `op` with the message of `len` bytes at `data` (a registered buffer of `capacity` bytes, lkey 0 for an
    // inline send from the stack): into the peer's eager ring when it granted one with room, the footer fits
    // behind the data and nothing waits in the send queue (order), else a SEND_WITH_IMM into its smallest SRQ that
    // holds it. Returns true for the ring.
    [[gnu::always_inline]] bool prepare(SendOp &op, unsigned char *data, std::uint32_t len, std::uint32_t lkey,
                                        std::uint8_t tag, std::size_t capacity) noexcept {
        return prepare_routed(op, eager.can_send(len) && eager_wire_size(len) <= capacity && queue->can_post(), data,
                              len, lkey, tag);
    }
    // prepare() for a caller that has just evaluated that rule itself (sendi, which must know the wire size before
    // it assembles the message): `ring` is its answer, and nothing changed since.
    [[gnu::always_inline]] bool prepare_routed(SendOp &op, bool ring, unsigned char *data, std::uint32_t len,
                                               std::uint32_t lkey, std::uint8_t tag) noexcept {
        if (ring)
            prepare_ring(op, data, len, lkey, tag);
        else
            prepare_srq(op, data, len, lkey, make_imm(tag));
        return ring;
    }
    // A SEND_WITH_IMM of `len` bytes with immediate `imm` (flags added) into the smallest SRQ that holds it.
    [[gnu::always_inline]] void prepare_srq(SendOp &op, const void *data, std::uint32_t len, std::uint32_t lkey,
                                            std::uint32_t imm) noexcept {
        op.sge.addr = reinterpret_cast<std::uintptr_t>(data);
        op.sge.length = len;
        op.sge.lkey = lkey;
        op.wr.sg_list = &op.sge;
        op.wr.num_sge = 1;
        op.wr.opcode = IBV_WR_SEND_WITH_IMM;
        op.wr.imm_data = htonl(imm | imm_flags);
        op.wr.send_flags = 0;
        op.wr.qp_type.xrc.remote_srqn = srq_for(len);
        imm_flags = 0;
    }
    // An eager RDMA set-up message (kImmControl). It leaves the first-message flag to the next data message: a
    // control message is neither counted nor numbered (replay_filter.h), so the first message of a connection,
    // where both sides' counts start again, must be one that is.
    void prepare_control(SendOp &op, const void *data, std::uint32_t len, std::uint32_t lkey) noexcept {
        const std::uint32_t flags = imm_flags;
        imm_flags = 0;
        prepare_srq(op, data, len, lkey, kImmMarker | kImmControl);
        imm_flags = flags;
    }
    // A send kept for replay (several rails), just prepared: its place in its stream.
    [[gnu::always_inline]] void number(SendOp &op, bool ring) noexcept {
        op.replay_stream = ring ? ReplayStream::ring : ReplayStream::srq;
        op.replay_seq = streams.number(ring, !ring && (op.wr.imm_data & htonl(kImmFirst)) != 0);
    }
    // The prepared message could not be posted after all (sendi gives up): what prepare() took goes back.
    void unprepare(const SendOp &op, bool ring) noexcept {
        if (ring)
            eager.unclaim();
        else
            imm_flags |= ntohl(op.wr.imm_data) & kImmFirst;
    }

    // No more writes into the peer's ring (nor a request for one): what follows goes through its SRQs.
    void stop_ring() noexcept {
        eager.close();
        eager_state = EagerState::off;
    }
    // The ring is written no more until resume_ring(): the connection that reached it timed out or broke.
    void pause_ring() noexcept {
        if (eager_state != EagerState::active && !ring_paused()) return;
        eager.pause();
        eager_state = EagerState::paused;
    }
    // The copies of what the timed-out connection did not acknowledge are queued (the queue handed every one back):
    // the next SRQ send may ask the peer to resume.
    void copies_queued() noexcept {
        if (eager_state == EagerState::paused) eager_state = EagerState::resume_due;
    }
    bool ring_paused() const noexcept {
        return eager_state == EagerState::paused || eager_state == EagerState::resume_due ||
               eager_state == EagerState::resuming;
    }
    // The peer stands where our writes stopped: they go on.
    void resume_ring() noexcept {
        eager.resume();
        eager_state = EagerState::active;
    }
    // What is prepared from now on goes over a new connection: its first SRQ message says so (both sides count from
    // 0 again there); what becomes of the ring the old one reached: `ring`.
    void next_connection(RingAfter ring) noexcept {
        imm_flags = kImmFirst;
        if (ring == RingAfter::stopped)
            stop_ring();
        else if (ring == RingAfter::paused)
            pause_ring();
    }

    // After an SRQ send: true when it is time to ask the peer for a ring, or to write into it again.
    bool count_srq_send(std::uint32_t threshold) noexcept {
        return (eager_state == EagerState::counting && ++eager_sends >= threshold) ||
               eager_state == EagerState::resume_due;
    }

private:
    [[gnu::always_inline]] void prepare_ring(SendOp &op, unsigned char *data, std::uint32_t len, std::uint32_t lkey,
                                             std::uint8_t tag) noexcept {
        auto *footer = reinterpret_cast<EagerFooter *>(data + eager_padded(len));
        // Piggyback how much of the peer's ring traffic we consumed: that report needs no RDMA WRITE of its own.
        std::uint64_t ack = 0;
        if (granted != nullptr) {
            ack = granted->consumed();
            granted->reported(ack);
        }
        const std::uint64_t remote = eager.claim(len, tag, ack, footer);
        op.sge.addr = reinterpret_cast<std::uintptr_t>(data);
        op.sge.length = eager_wire_size(len);
        op.sge.lkey = lkey;
        op.wr.sg_list = &op.sge;
        op.wr.num_sge = 1;
        op.wr.opcode = IBV_WR_RDMA_WRITE;
        op.wr.send_flags = 0;
        op.wr.imm_data = 0;
        op.wr.wr.rdma.remote_addr = remote;
        op.wr.wr.rdma.rkey = eager.rkey();
        op.wr.qp_type.xrc.remote_srqn = srqs.front().srq_num;
    }
};

}  // namespace xrc
