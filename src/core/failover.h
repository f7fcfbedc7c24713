// SPDX-License-Identifier: BSD-3-Clause
// Surviving the loss of a rail, the decisions: which rail takes over a peer, what the header of a message carried
// by another rail says (wire_format.h's ForwardedHeader) and how it is read, how a receiver takes what the lost
// rail delivered off its queues before it judges a copy, and the verdict (replay_filter.h has the numbering and
// the counts). The BTL (btl_xrc/btl_xrc_failover.cc) maps these onto ob1's fragments and callbacks.
#pragma once

#include "counters.h"
#include "eager_rdma.h"
#include "replay_filter.h"
#include "send_queue.h"
#include "wire_format.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace xrc {

// The rail that carries a peer's traffic once `lost` no longer reaches it: the first other one, in the order the
// rails were made (every process makes them in the same order, so both ends of a pair pick alike when they can),
// for which `usable(rail)` holds: the caller's to say (not lost itself, not finalizing, reaches the peer over a
// connection that is not broken). Null when none does.
template <class Rails, class Rail, class Usable>
Rail *choose_sibling(const Rails &rails, const Rail *lost, Usable usable) noexcept {
    for (const auto &rail : rails) {
        Rail *candidate = &*rail;
        if (candidate != lost && usable(*candidate)) return candidate;
    }
    return nullptr;
}

// The header in front of a message that another rail carries for the rail whose fabric is `subnet_prefix`.
// `failed`: the send as it was numbered on that rail when its completion failed there (replay_filter.h), or null
// for a message that never was sent on it (forwarded from the start). A numbered send that never reached the
// lost rail's QP (posted_on 0: queued when the rail failed, or its post refused) cannot have been delivered
// either: fresh. `my_rank` names the writer of a ring.
inline ForwardedHeader forwarded_header(const std::uint8_t (&subnet_prefix)[8], std::uint8_t tag, const SendOp *failed,
                                        std::uint32_t my_rank) noexcept {
    ForwardedHeader header{};
    header.magic_version = kForwardedMagic;
    header.tag = tag;
    header.stream = static_cast<std::uint8_t>(ReplayStream::fresh);
    std::memcpy(header.subnet_prefix, subnet_prefix, sizeof(header.subnet_prefix));
    if (failed == nullptr || failed->posted_on == 0 || failed->replay_stream == ReplayStream::fresh) return header;
    header.stream = static_cast<std::uint8_t>(failed->replay_stream);
    header.seq = failed->replay_seq;
    if (failed->replay_stream == ReplayStream::srq) {
        header.tgt_qpn = source_tgt_qpn(failed->posted_on);
        header.ini_qpn = source_ini_qpn(failed->posted_on);
    } else {
        header.rank = my_rank;
    }
    return header;
}

// The header of a forwarded message of `length` bytes, or nothing when it is too short, of another version, or
// names a stream that does not exist (such a message is dropped: nothing in it can be trusted).
inline std::optional<ForwardedHeader> read_forwarded_header(const void *data, std::size_t length) noexcept {
    ForwardedHeader header;
    if (data == nullptr || length < sizeof(header)) return std::nullopt;
    std::memcpy(&header, data, sizeof(header));
    if (header.magic_version != kForwardedMagic || header.stream > static_cast<std::uint8_t>(ReplayStream::ring))
        return std::nullopt;
    return header;
}

inline ReplayStream stream_of(const ForwardedHeader &header) noexcept {
    return static_cast<ReplayStream>(header.stream);
}
inline SourceKey source_of(const ForwardedHeader &header) noexcept {
    return source_key(header.tgt_qpn, header.ini_qpn);
}

// A copy whose rail has been drained: `taken` is what the receiver took of the header's stream off that rail (the
// SRQ count of its connection, or what the writer's ring consumed).
inline ReplayVerdict judge_forwarded(const ForwardedHeader &header, std::uint32_t taken) noexcept {
    if (stream_of(header) == ReplayStream::fresh) return ReplayVerdict::deliver;
    return judge_replay(header.seq, taken);
}

// Takes what a rail delivered off its queues before a copy is judged: `poll()` handles what one progress call
// finds (rings and completion queue) and returns how many. The original of a copy reached this process's HCA
// before its sender's HCA gave up on it, and the copy was sent after that, so its completion (or ring write) is
// already there: polling until one call finds nothing takes it. `bound` calls at most, so that a peer that keeps
// sending on the rail cannot hold the caller here; true when the rail was found empty.
template <class Poll>
bool drain_until_empty(Poll poll, unsigned bound) noexcept {
    for (unsigned i = 0; i < bound; ++i)
        if (poll() == 0) return true;
    return false;
}

// What this process took off the lost rail of the stream `header` names: the SRQ messages of its connection
// (`srq_taken`, the lost rail's counts), or what was consumed from the ring its writer writes into (`writer_ring`:
// the ring this process granted the header's rank on that rail, null when none; 0 then: the copy is delivered).
inline std::uint32_t taken_on(const ForwardedHeader &header, const SourceCounts &srq_taken,
                              const EagerRing *writer_ring) noexcept {
    if (stream_of(header) == ReplayStream::srq) return srq_taken.of(source_of(header));
    return writer_ring != nullptr ? static_cast<std::uint32_t>(writer_ring->messages()) : 0;
}

// A copy sent again after a lost rail failed its original: true when that rail delivered the original (the copy is
// dropped). What the rail delivered is taken off it first (`poll`, see drain_until_empty: its completion queue and
// rings may still hold the original), then the copy is judged against what was taken (`taken()`, read after the
// drain) and counted in the lost rail's `counters`. Once deep: a copy met while draining does not drain again (the
// rail whose poll met it may be the one that would be drained, and its ring's current message is not released
// yet). `undrained()` is called when the rail still delivered after `bound` polls: the copy is judged anyway.
// Progress context, under the data-path lock (the lost rail's queues are this thread's to poll).
namespace detail {
// One flag for every instance of delivered_already below: a copy met while draining may be judged by another.
inline thread_local bool draining_a_rail = false;
}  // namespace detail

template <class Poll, class Taken, class Undrained>
bool delivered_already(const ForwardedHeader &header, Poll poll, Taken taken, Undrained undrained, unsigned bound,
                       Counters &counters) noexcept {
    if (!detail::draining_a_rail) {
        detail::draining_a_rail = true;
        if (!drain_until_empty(poll, bound)) undrained();
        detail::draining_a_rail = false;
    }
    if (judge_forwarded(header, taken()) == ReplayVerdict::duplicate) {
        ++counters.replays_dropped;
        return true;
    }
    ++counters.replays_delivered;
    return false;
}

// The rail on the fabric a forwarded message names (`subnet_prefix` of its header), among those that still have a
// transport (`fabric_of(rail)` gives a rail's prefix, null for one without): the last such, or null.
template <class Rails, class FabricOf>
auto *rail_on_fabric(const Rails &rails, const std::uint8_t (&subnet_prefix)[8], FabricOf fabric_of) noexcept {
    decltype(&**rails.begin()) found = nullptr;
    for (const auto &rail : rails) {
        const std::uint8_t *prefix = fabric_of(*rail);
        if (prefix != nullptr && std::memcmp(prefix, subnet_prefix, sizeof(subnet_prefix)) == 0) found = &*rail;
    }
    return found;
}

// The names of the rails other than `lost` that still carry traffic (`carries(rail)`), for a message: "a, b".
template <class Rails, class Rail, class Carries, class Name>
std::string surviving_rails(const Rails &rails, const Rail *lost, Carries carries, Name name) {
    std::string names;
    for (const auto &rail : rails) {
        if (&*rail == lost || !carries(*rail)) continue;
        names += (names.empty() ? "" : ", ") + name(*rail);
    }
    return names;
}

// The largest message ob1 may hand a rail of `rails` rails when its sends may be forwarded: a header in front of it
// per rail it may go over (a copy whose rail fails too is forwarded again, header and all).
constexpr std::size_t forwardable_size(std::size_t max_send_size, std::size_t rails) noexcept {
    return max_send_size - (rails - 1) * sizeof(ForwardedHeader);
}

// The nodes toward which a rail was given up, each reported once.
class LostNodes {
public:
    // True the first time `node` is lost. Out of memory, it throws.
    bool first(std::uint32_t node) {
        if (std::find(nodes_.begin(), nodes_.end(), node) != nodes_.end()) return false;
        nodes_.push_back(node);
        return true;
    }
    // The rail reaches `node` again: a later loss is reported again.
    void forget(std::uint32_t node) noexcept { std::erase(nodes_, node); }

private:
    std::vector<std::uint32_t> nodes_;  // O(nodes lost): a short list
};

// Sends whose completion progress owes their owner (a forwarded original, RDMA refused toward a lost rail), oldest
// first, linked through their next_pending. Under the data-path lock.
class DeferredOps {
public:
    void push(SendOp *op) noexcept {
        op->next_pending = nullptr;
        if (tail_ != nullptr)
            tail_->next_pending = op;
        else
            head_ = op;
        tail_ = op;
    }
    // Completes every one, oldest first, with `complete(op)`; those it defers again wait for the next call.
    template <class Complete>
    void complete_all(Complete complete) noexcept {
        SendOp *op = head_;
        head_ = tail_ = nullptr;
        while (op != nullptr) {
            SendOp *next = op->next_pending;
            complete(op);
            op = next;
        }
    }

private:
    SendOp *head_ = nullptr;
    SendOp *tail_ = nullptr;
};

}  // namespace xrc
