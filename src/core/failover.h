// SPDX-License-Identifier: BSD-3-Clause
// Surviving the loss of a rail, the decisions: which rail takes over a peer, what the header of a message carried
// by another rail says (wire_format.h's ForwardedHeader) and how it is read, how a receiver takes what the lost
// rail delivered off its queues before it judges a copy, and the verdict (replay_filter.h has the numbering and
// the counts). The BTL (btl_xrc/btl_xrc_failover.cc) maps these onto ob1's fragments and callbacks.
#pragma once

#include "replay_filter.h"
#include "send_queue.h"
#include "wire_format.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

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

}  // namespace xrc
