// SPDX-License-Identifier: BSD-3-Clause
// Exactly once across a lost rail: the numbering a sender gives what it posts, the counts a receiver keeps of what
// it took, and the verdict on a message sent again. The BTL's failover (btl_xrc/btl_xrc_failover.cc) only maps
// them onto ob1's fragments.
//
// Why it holds. XRC delivers in order per INI QP, and one INI QP carries all of a process's sends to a node, so
// what one connection delivered from one sender to one receiver is a prefix of what the sender posted to it there.
// When a rail dies, the sends whose completions failed are sent again over another rail, each naming the
// connection it was posted on and its position there; the receiver first takes everything that connection
// delivered off its queues (the BTL drains the lost rail's completion queue and rings), then drops a copy whose
// position is below its count (it arrived, only its acknowledgement was lost) and delivers the others. The copies
// may arrive in any order (what the sender's queue still held fails at once, what its HCA had taken fails later
// with the flush), so a copy is judged against what the connection delivered only, never against the copies before
// it. A send that never reached a QP (queued when the rail died, or its post failed) cannot have been delivered:
// its copy is fresh and delivered.
//
// Two streams per sender and receiver: the SRQ sends, numbered per connection (a new connection's first SRQ send
// carries kImmFirst, and both sides count from 0 again there), known to the receiver by the connection they came
// through (its TGT QP and the sender's INI QP: wc.qp_num and wc.src_qp, which no LID change moves); and the writes
// into the eager RDMA ring the receiver granted the sender, numbered for the ring's life, which the ring counts.
// Control messages and fences are outside both streams (never numbered, never counted, never sent again).
#pragma once

#include <cstdint>
#include <unordered_map>

namespace xrc {

// A connection as its receiver sees it: (TGT QP number << 32) | the sender's INI QP number. 0 is no connection
// (QP number 0 is the subnet management QP, never a data QP's).
using SourceKey = std::uint64_t;
constexpr SourceKey source_key(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept {
    return (SourceKey{tgt_qpn} << 32) | ini_qpn;
}
constexpr std::uint32_t source_tgt_qpn(SourceKey key) noexcept {
    return static_cast<std::uint32_t>(key >> 32);
}
constexpr std::uint32_t source_ini_qpn(SourceKey key) noexcept {
    return static_cast<std::uint32_t>(key);
}

enum class ReplayStream : std::uint8_t {
    fresh = 0,  // never reached the lost rail's QP: delivered
    srq = 1,    // position in the SRQ stream of the connection it was posted on
    ring = 2,   // position in the stream of writes into the receiver's ring
};

// What to do with a message sent again at position `seq`, given `taken`: how many of the same stream the
// receiver took off the lost rail (all of them: the rail was drained first). Positions are 32-bit and wrap: a
// copy's position is within the send queue's depth of the count (only what was posted and not yet acknowledged is
// sent again), so the signed difference decides.
enum class ReplayVerdict : std::uint8_t {
    deliver,    // the rail did not deliver it
    duplicate,  // the rail delivered it already: dropped
};
constexpr ReplayVerdict judge_replay(std::uint32_t seq, std::uint32_t taken) noexcept {
    return static_cast<std::int32_t>(seq - taken) < 0 ? ReplayVerdict::duplicate : ReplayVerdict::deliver;
}

// The sender's side, per peer and rail: the next position in each stream. A send kept for replay is numbered
// right after it was prepared (Peer::prepare), in the order it will reach the wire (the caller holds the lock the
// queue's users hold, and the queue keeps order).
class SendStreams {
public:
    // `first`: the SRQ send carries kImmFirst (the first over a new connection): the receiver counts from 0 again.
    [[gnu::always_inline]] std::uint32_t number(bool ring, bool first) noexcept {
        if (ring) return ring_next_++;
        if (first) srq_next_ = 0;
        return srq_next_++;
    }
    // The numbered send was not posted after all (a sendi that gives up): its position is free again. A first send
    // taken back leaves its flag to the next one (Peer::unprepare), which restarts the count itself.
    void unnumber(bool ring) noexcept { --(ring ? ring_next_ : srq_next_); }

private:
    std::uint32_t srq_next_ = 0;
    std::uint32_t ring_next_ = 0;
};

// The receiver's side, per rail: the SRQ messages taken off it, by connection. An entry is made on a connection's
// first message (an allocation once per connection, not per message) and removed when its sender closes it (the
// close comes after the sender's fence retired everything it posted there: nothing of it is ever sent again), so
// the table holds the connections that deliver to this process now, plus those a lost rail broke. The last
// connection is cached, since traffic comes in runs from one sender.
class SourceCounts {
public:
    // One more message from `source`; `first`: the first of a new connection to this process (kImmFirst), where the
    // sender's numbering starts again. Out of memory for a new connection's entry, the message is not counted: a
    // copy of it would then be delivered again (at least once, as without the counts), never lost.
    [[gnu::always_inline]] void count(SourceKey source, bool first = false) noexcept {
        if (source != last_key_ || last_ == nullptr) {
            try {
                last_ = &counts_[source];
            } catch (...) {
                return;
            }
            last_key_ = source;
        }
        if (first) *last_ = 0;
        ++*last_;
    }
    // The count of `source` (0 for a connection never heard from).
    std::uint32_t of(SourceKey source) const noexcept {
        auto it = counts_.find(source);
        return it != counts_.end() ? it->second : 0;
    }
    // Its sender closed the connection: no copy of anything it carried will come.
    void forget(SourceKey source) noexcept {
        if (source == last_key_) last_ = nullptr;
        counts_.erase(source);
    }
    std::size_t sources() const noexcept { return counts_.size(); }

private:
    std::unordered_map<SourceKey, std::uint32_t> counts_;  // node-based: an entry's address stays valid
    SourceKey last_key_ = 0;
    std::uint32_t *last_ = nullptr;
};

}  // namespace xrc
