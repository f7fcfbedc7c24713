// SPDX-License-Identifier: BSD-3-Clause
// The eager RDMA protocol of one port (the rings themselves are eager_rdma.h): the registered block that holds
// the rings this process grants, the credit words its peers report into and the words its own reports are sent
// from; the set-up handshake (Request -> Grant or Refuse, control messages over the SRQ path); polling the
// granted rings and reporting credits back to their writers.
//
// Whoever embeds it (the BTL) passes a sink to the calls that may reach beyond the core. The sink is a type
// resolved at compile time, so polling costs no indirect call per message. It provides:
//   Peer *peer_of(std::uint32_t rank)
//       the live peer of that rank, or null (not added yet, or removed)
//   bool send_control(Peer &to, const EagerControl &message)
//       sends the control message over the SRQ path (kImmControl); false when it could not be posted or queued
//   void deliver(std::uint32_t ring, Peer *from, std::uint8_t tag, unsigned char *data, std::uint32_t length)
//       hands a message of granted ring `ring` (below EagerConfig::max_peers) up (from: null once the writer was
//       removed); the bytes are valid during the call. Two deliveries of one ring never overlap: a ring is not
//       polled while one of its messages is being delivered.
//   void ring_failed(const EagerRingFailure &failure)
//       a ring stopped: its writer's messages from then on are never read
//   void note(const EagerEvent &event)
//       a handshake step or a dropped control message, for the log
// Every call is made from the caller's thread, under whatever lock the caller holds (docs/architecture.md).
#pragma once

#include "counters.h"
#include "eager_credit_words.h"
#include "eager_rdma.h"
#include "peer.h"
#include "registered_block.h"
#include "result.h"
#include "send_queue.h"
#include "wire_format.h"

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xrc {

struct EagerConfig {
    std::uint32_t my_rank = 0;    // the sender named in our control messages
    std::uint32_t max_peers = 0;  // rings this process grants, and rings it may write into; 0: eager RDMA off
    std::uint32_t slots = 0;      // ring size, in spans of slot_size bytes
    std::uint32_t slot_size = 0;  // largest span, a multiple of kEagerGranule
    std::uint32_t threshold = 0;  // SRQ sends to a peer before it is asked for a ring (1 or more)
    bool inline_reports = false;  // a credit report (8 bytes) fits the QPs' inline data
};

// The handshake steps and drops the sink hears of (for the log; the counters are counted already).
enum class EagerNote : std::uint8_t {
    granted,            // we granted `rank` ring `index` of `slots` x `slot_size`
    refused_off,        // we refused `rank`: eager RDMA is off here
    refused_all_given,  // we refused `rank`: every ring is given
    asked_early,        // `rank` asked before it was added here: answered when it is
    using_ring,         // `rank` granted us its ring of `slots` x `slot_size`
    refused_by,         // `rank` refused us: our messages to it stay on the SRQs
    resumed_by,         // `rank` agreed: we write into its ring again after our connection timed out or broke
    resume_refused,     // `rank` asked to write into our ring again where it does not stand: it stays on the SRQs
    malformed_control,  // a control message of `bytes` bytes was dropped, nothing else done
};

struct EagerEvent {
    EagerNote what;
    std::uint32_t rank = 0;
    std::uint32_t index = 0;
    std::uint32_t slots = 0;
    std::uint32_t slot_size = 0;
    std::size_t bytes = 0;
};

// The log line a BTL shows for `event` ("eager RDMA ring 2 (8 x 12352 bytes) granted to rank 5") and the
// verbosity it is shown at: 10 for the handshake, 1 for a dropped control message.
struct EagerNoteLine {
    int verbosity;
    std::string text;
};
EagerNoteLine describe(const EagerEvent &event);

// A footer failed its check: the ring's bytes cannot be trusted and nothing after them can be located.
struct EagerRingFailure {
    Peer *writer;            // null once the writer was removed
    std::uint8_t tag;        // as the footer says
    std::uint64_t position;  // ring bytes consumed before it
};

class EagerManager {
public:
    EagerManager() = default;  // off until init()
    EagerManager(const EagerManager &) = delete;
    EagerManager &operator=(const EagerManager &) = delete;

    // Lays out and allocates the block for `config` (off when max_peers is 0: every request is refused). Counts
    // into `counters`, which must outlive the manager. Out of memory: an Error of kind resource, made without
    // allocating (then off).
    Result<void> init(const EagerConfig &config, Counters &counters) noexcept;
    // Registers the block on `pd` for local and remote writes. When the provider refuses: a system Error with its
    // errno (errnum()); the caller then calls off().
    Result<void> register_on(ibv_pd *pd) noexcept;
    // Off from here on: every ring and word released, the block deregistered (before its PD goes).
    void off() noexcept;

    bool enabled() const noexcept { return threshold_ != 0; }
    // SRQ sends to a peer before it is asked for a ring; 0 when off.
    std::uint32_t threshold() const noexcept { return threshold_; }
    std::size_t block_bytes() const noexcept { return block_.size(); }
    std::uint32_t rings_granted() const noexcept { return rings_used_; }
    std::uint32_t credit_words_available() const noexcept { return credit_words_.available(); }

    // A new peer (its route attached): it starts counting toward a request, or stays off; answers the ring
    // request it sent before it was added, if any.
    template <class Sink>
    void peer_added(Peer &peer, Sink &sink) noexcept;
    // The peer goes away: the ring it writes into, if any, stays polled but no longer names it (its messages still
    // in the ring are delivered from nobody). Its credit word stays taken: it may still report into it.
    void peer_removed(Peer &peer) noexcept;
    // Asks the peer for a ring (Peer::count_srq_send said it is time), or, for a peer whose ring is paused, to
    // write into it again from where the writes stopped.
    template <class Sink>
    void request(Peer &peer, Sink &sink) noexcept;
    // A control message arrived through the SRQ path (kImmControl). Anything malformed is dropped.
    template <class Sink>
    void on_control(const void *data, std::size_t length, Sink &sink) noexcept;
    // Polls the granted rings: delivers what arrived, reports credits that are due. Returns the messages handled
    // (delivered or not).
    template <class Sink>
    int poll(Sink &sink) noexcept;
    // A copy of write number `seq` (from 0) of `writer` into the ring we granted it, `length` bytes, is being
    // delivered: it came through the SRQs after the writer's connection timed out or broke, so its span is passed
    // over when it is the one the ring waits for (EagerRing::skip). True when it was.
    bool skip_copy(const Peer &writer, std::uint32_t seq, std::uint32_t length) noexcept;

private:
    static constexpr std::size_t kWordStride = 8;  // one credit or report word per 64-byte line

    // The receive side of one granted ring, and where its credit reports go.
    struct GrantedRing {
        EagerRing ring;
        SendQueue *queue = nullptr;     // toward the writer's node
        std::uint32_t remote_srqn = 0;  // one of the writer's SRQs: XRC routes an RDMA WRITE by it
        std::uint64_t credit_addr = 0;  // the writer's credit word
        std::uint32_t credit_rkey = 0;
        std::uint64_t *report_word = nullptr;  // registered source of our reports
        Peer *writer = nullptr;                // null once the peer was removed
        bool busy = false;                     // one of its messages is being delivered: no reentry from a nested poll
    };

    EagerControl control_of(EagerControlType type) const noexcept;
    std::uint64_t *credit_word(std::uint32_t index) const noexcept {
        return credit_words_base_ + std::size_t(index) * kWordStride;
    }
    // Takes the next ring for `peer`; fills `grant`. False (nothing taken) when none is left or eager RDMA is off,
    // with the reason in `note`.
    bool take_ring(Peer &peer, const EagerControl &request, EagerControl &grant, EagerNote &note) noexcept;
    // Tells the writer how many bytes of the ring were consumed (an RDMA WRITE into its credit word). Retried at the
    // next poll when the send queue has no room.
    [[gnu::cold]] void report(GrantedRing &ring) noexcept;

    template <class Sink>
    void on_request(const EagerControl &request, Sink &sink) noexcept;
    // A writer asks to write into its ring again (Resume): it may when the ring, once what arrived in it is taken,
    // stands where the writer's writes stopped; otherwise it is refused and stays on the SRQs.
    template <class Sink>
    void on_resume(const EagerControl &resume, Sink &sink) noexcept;
    GrantedRing *ring_of(const Peer &writer) const noexcept;
    template <class Sink>
    void answer(Peer &peer, const EagerControl &request, Sink &sink) noexcept;
    // A grant or refusal of what we requested from `peer` (null: not a peer of ours). False when we asked for
    // nothing: ignored.
    bool on_grant(Peer *peer, const EagerControl &grant) noexcept;
    bool on_refuse(Peer *peer) noexcept;
    bool on_resumed(Peer *peer) noexcept;

    Counters *counters_ = nullptr;
    std::uint32_t my_rank_ = 0;
    std::uint32_t threshold_ = 0;
    std::uint32_t max_peers_ = 0, slots_ = 0, slot_size_ = 0;
    bool inline_reports_ = false;
    std::uint32_t rings_used_ = 0;  // rings_[0, rings_used_) are granted and polled
    std::unique_ptr<GrantedRing[]> rings_;
    EagerCreditWords credit_words_;
    RegisteredBlock block_;  // rings, then credit words, then report words
    std::uint64_t *credit_words_base_ = nullptr;
    std::uint32_t lkey_ = 0, rkey_ = 0;
    // Requests from peers not added yet (a peer is added when this process first sends to it): answered when
    // peer_added() comes. At most one per peer.
    std::vector<EagerControl> early_requests_;
};

template <class Sink>
void EagerManager::peer_added(Peer &peer, Sink &sink) noexcept {
    peer.eager_state = enabled() ? EagerState::counting : EagerState::off;
    peer.eager_sends = 0;
    for (auto it = early_requests_.begin(); it != early_requests_.end(); ++it) {
        if (it->rank != peer.rank) continue;
        const EagerControl request = *it;
        early_requests_.erase(it);
        answer(peer, request, sink);
        return;
    }
}

template <class Sink>
void EagerManager::request(Peer &peer, Sink &sink) noexcept {
    if (peer.eager_state == EagerState::resume_due) {
        EagerControl resume = control_of(EagerControlType::Resume);
        resume.addr = peer.eager.position();
        resume.slots = static_cast<std::uint32_t>(peer.eager.written());
        resume.slot_size = static_cast<std::uint32_t>(peer.eager.written() >> 32);
        if (!sink.send_control(peer, resume)) return;  // asked again at the next SRQ send
        peer.eager_state = EagerState::resuming;
        ++counters_->eager_ring_resumes_asked;
        return;
    }
    std::uint32_t word = 0;
    if (!enabled() || !credit_words_.take(word)) {  // every credit word is in use: this peer stays on the SRQs
        peer.eager_state = EagerState::off;
        return;
    }
    EagerControl request = control_of(EagerControlType::Request);
    request.addr = reinterpret_cast<std::uintptr_t>(credit_word(word));
    request.rkey = rkey_;
    peer.eager_word = word;
    peer.eager_state = EagerState::requested;
    if (!sink.send_control(peer, request)) {
        credit_words_.give_back(word);
        peer.eager_state = EagerState::off;
        return;
    }
    ++counters_->eager_ring_requests;
}

template <class Sink>
void EagerManager::on_control(const void *data, std::size_t length, Sink &sink) noexcept {
    EagerControl control;
    if (!decode_eager_control(data, length, control)) {
        EagerEvent event{EagerNote::malformed_control};
        event.bytes = length;
        sink.note(event);
        return;
    }
    if (!enabled() && control.type != EagerControlType::Request) return;  // we never asked
    switch (control.type) {
        case EagerControlType::Request:
            on_request(control, sink);
            return;
        case EagerControlType::Grant:
            if (on_grant(sink.peer_of(control.rank), control))
                sink.note(EagerEvent{EagerNote::using_ring, control.rank, 0, control.slots, control.slot_size});
            return;
        case EagerControlType::Refuse:
            if (on_refuse(sink.peer_of(control.rank))) sink.note(EagerEvent{EagerNote::refused_by, control.rank});
            return;
        case EagerControlType::Resume:
            on_resume(control, sink);
            return;
        case EagerControlType::Resumed:
            if (on_resumed(sink.peer_of(control.rank))) sink.note(EagerEvent{EagerNote::resumed_by, control.rank});
            return;
    }
}

template <class Sink>
void EagerManager::on_request(const EagerControl &request, Sink &sink) noexcept {
    if (Peer *peer = sink.peer_of(request.rank); peer != nullptr) {
        answer(*peer, request, sink);
        return;
    }
    for (const auto &early : early_requests_)
        if (early.rank == request.rank) return;  // a peer asks once: a duplicate is malformed
    sink.note(EagerEvent{EagerNote::asked_early, request.rank});
    try {
        early_requests_.push_back(request);
    } catch (...) {  // out of memory: the asker keeps using the SRQs toward us
    }
}

// A peer asks for a ring: grant the next free one, or refuse (none left, or eager RDMA is off here), so the asker
// stops waiting and frees its credit word.
template <class Sink>
void EagerManager::answer(Peer &peer, const EagerControl &request, Sink &sink) noexcept {
    EagerControl grant;
    EagerEvent event{EagerNote::granted, request.rank};
    if (!take_ring(peer, request, grant, event.what)) {
        sink.note(event);
        if (sink.send_control(peer, control_of(EagerControlType::Refuse))) ++counters_->eager_rings_refused;
        return;
    }
    if (!sink.send_control(peer, grant)) return;  // the ring stays free for the next asker
    GrantedRing &r = rings_[rings_used_];
    peer.granted = &r.ring;
    event.index = rings_used_;
    event.slots = slots_;
    event.slot_size = slot_size_;
    ++rings_used_;  // polled from now on
    ++counters_->eager_rings_granted;
    sink.note(event);
}

template <class Sink>
void EagerManager::on_resume(const EagerControl &resume, Sink &sink) noexcept {
    Peer *peer = sink.peer_of(resume.rank);
    if (peer == nullptr) return;  // gone: nobody to answer
    const std::uint64_t written = resume.slots | std::uint64_t{resume.slot_size} << 32;
    GrantedRing *r = ring_of(*peer);
    bool agreed = false;
    if (r != nullptr && !r->busy && !r->ring.broken()) {
        counters_->ring_receives += static_cast<std::uint64_t>(poll(sink));  // what landed before the timeout
        agreed = !r->busy && r->ring.consumed() == resume.addr && r->ring.messages() == written;
    }
    if (!agreed) {
        if (sink.send_control(*peer, control_of(EagerControlType::Refuse))) ++counters_->eager_ring_resumes_refused;
        sink.note(EagerEvent{EagerNote::resume_refused, resume.rank});
        return;
    }
    if (sink.send_control(*peer, control_of(EagerControlType::Resumed))) ++counters_->eager_ring_resumes_agreed;
}

template <class Sink>
[[gnu::always_inline]] inline int EagerManager::poll(Sink &sink) noexcept {
    int handled = 0;
    for (std::uint32_t i = 0; i < rings_used_; ++i) {
        GrantedRing &r = rings_[i];
        if (r.busy) continue;
        EagerRing::Message message;
        while (r.ring.peek(message)) {
            if (__builtin_expect(message.well_formed, 1)) {
                if (r.writer != nullptr) r.writer->eager.note_ack(message.ack);
                r.busy = true;
                sink.deliver(i, r.writer, message.tag, const_cast<unsigned char *>(message.data), message.length);
                r.busy = false;
            } else {
                // The writer's messages from here on would never be read and it would stall waiting for credits.
                sink.ring_failed(EagerRingFailure{r.writer, message.tag, r.ring.consumed()});
            }
            r.ring.release(message);
            ++handled;
        }
        if (r.ring.report_due()) report(r);
    }
    return handled;
}

}  // namespace xrc
