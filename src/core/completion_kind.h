// SPDX-License-Identifier: BSD-3-Clause
// What a completion of the port's CQ belongs to, from the low two bits of its work request id: a send queue (the
// id is the SendQueue's address, with the request's ring slot in its top bits: send_queue.h), an SRQ receive
// buffer (RecvBuffer address | 1), or the connection manager's UD QP (index << 2 | 2 for a receive, | 3 for a
// send). The port's one completion loop switches on it once.
#pragma once

#include <cstdint>

namespace xrc {

enum class CompletionKind : std::uint8_t { send = 0, receive = 1, cm_receive = 2, cm_send = 3 };

inline constexpr CompletionKind completion_kind(std::uint64_t wr_id) noexcept {
    return static_cast<CompletionKind>(wr_id & 3u);
}
inline constexpr std::uint64_t cm_wr_id(std::uint32_t index, CompletionKind kind) noexcept {
    return (std::uint64_t(index) << 2) | static_cast<std::uint64_t>(kind);
}
inline constexpr std::uint32_t cm_wr_index(std::uint64_t wr_id) noexcept { return static_cast<std::uint32_t>(wr_id >> 2); }

}  // namespace xrc
