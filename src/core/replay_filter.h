// SPDX-License-Identifier: BSD-3-Clause
// Exactly once across a lost rail (the BTL's failover, btl_xrc/btl_xrc_failover.cc). A sender counts, per peer and
// rail, the messages it posted on that rail; a receiver counts, per sender and rail, the messages it took off it.
// XRC delivers in order per INI QP, and one INI QP carries all of a process's sends to a node, so what a rail
// delivered from one sender to one receiver is a prefix of what that sender posted to it: when the rail dies, the
// messages whose completions failed are sent again over another rail, each with its position on the lost rail,
// and the receiver drops those below its own count (they arrived before the rail died, only their
// acknowledgements were lost). The copies may arrive in any order (what the sender's queue still held fails at
// once, what its HCA had taken fails with the flush, later), so a copy is judged against what the rail delivered
// only, never against the copies before it. A sender numbers its SRQ sends to a peer from 0 again on each new
// connection (the first one carries kImmFirst, and the receiver's count starts again there too). Nothing here is on the
// path of a process with one rail.
//
// The SRQ path and the eager RDMA ring are counted apart: a receiver knows an SRQ message's sender only by its
// source (LID and INI QP number, from the completion), and a ring's writer by the ring.
#pragma once

#include <cstdint>
#include <unordered_map>

namespace xrc {

// What to do with a message sent again with its position `seq` on the lost rail, given `taken`, how many
// messages of the same stream the receiver took off that rail (all of them: the rail was drained first).
enum class ReplayVerdict : std::uint8_t {
    deliver,    // the rail did not deliver it
    duplicate,  // the rail delivered it already: dropped
};

constexpr ReplayVerdict judge_replay(std::uint32_t seq, std::uint32_t taken) noexcept {
    return seq < taken ? ReplayVerdict::duplicate : ReplayVerdict::deliver;
}

// The SRQ messages a process took off one rail, by source (the sender's LID and INI QP number). An entry is
// made on a source's first message (an allocation once per sender, not per message); the last source is cached,
// since traffic comes in runs from one sender.
class SourceCounts {
public:
    static constexpr std::uint64_t key(std::uint16_t lid, std::uint32_t qpn) noexcept {
        return (std::uint64_t{lid} << 32) | qpn;
    }
    // One more message from `source`; `first`: the first on a new connection (kImmFirst), where the sender's
    // numbering starts again (a QP number may be reused by another process of the same node after an eviction: its
    // count must not go on from the old one's). Out of memory for a new source's entry, the message is not
    // counted: a message sent again is then delivered again (at least once, as without the counts), never lost.
    void count(std::uint64_t source, bool first = false) noexcept {
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
    // The count of `source` (0 for a source never heard from).
    std::uint32_t of(std::uint64_t source) const noexcept {
        auto it = counts_.find(source);
        return it != counts_.end() ? it->second : 0;
    }
    std::size_t sources() const noexcept { return counts_.size(); }

private:
    std::unordered_map<std::uint64_t, std::uint32_t> counts_;  // node-based: an entry's address stays valid
    std::uint64_t last_key_ = 0;
    std::uint32_t *last_ = nullptr;
};

}  // namespace xrc
