// SPDX-License-Identifier: BSD-3-Clause
// The sentences that name a one-sided or send operation that failed: what it was (its kind, size and remote
// address), how its completion failed and what that implies, in the words the BTL's error messages use (the
// tests grep them). Plain text from verbs structures: the BTL adds the host, rail and peer in front and behind.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <string>

namespace xrc {

// "RDMA read of 4096 bytes at 0x7f31c4a01000", "atomic fetch-and-add at 0x...", "send of 64 bytes".
std::string describe_operation(const ibv_send_wr &wr);

inline bool is_atomic(const ibv_send_wr &wr) noexcept {
    return wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
}

// Why a one-sided operation that failed with its rail (several rails) ends the job: an atomic may have executed
// (only its answer was lost) and its window is this rail's; an RDMA whose caller cannot move the data another way
// has its window registered on this rail only.
std::string one_sided_rail_failure(const ibv_send_wr &wr, ibv_wc_status status);

// The sentence for a failed send-queue completion `wc`: `operation` (what failed, and where it went when the
// operation names no peer), its status and vendor error, the port's state when it is not active (`port_state`,
// nothing when active or unknown: operations fail before the port's event is read), and, when the responder refused
// the request (class C: bad SRQ number, rkey or opcode), that this rank `my_rank` sent it on `qp` (describe_qp) and
// that the TGT QP it reached is now in the error state for every rank of that node.
std::string failed_completion_text(const std::string &operation, const ibv_wc &wc,
                                   std::optional<ibv_port_state> port_state, std::uint32_t my_rank,
                                   const std::string &qp);

}  // namespace xrc
