// SPDX-License-Identifier: BSD-3-Clause
// State of a tag-matching SRQ (IBV_SRQT_TM): the matching list the
// "hardware" holds and the counters that keep hardware and software matching
// in MPI order. The behaviour lives in tag_matching.cpp.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "../common/limits.hpp"
#include "../common/shm_layout.hpp"

namespace simhca {

// Marks the send WQEs a TM SRQ puts on a QP's send queue for a rendezvous
// (the RDMA READ of the sender's data and the FIN message): their
// completions go to the tag matching logic instead of the send CQ. Outside
// the range of enum ibv_send_flags.
constexpr uint32_t kTmInternalWqe = 1u << 31;

struct TaggedBuffer {
    // Rendezvous: matched, its RDMA READ under way; Finishing: data placed,
    // the FIN under way (the slot is busy until the FIN completes).
    enum class State : uint8_t { Free, Listed, Rendezvous, Finishing };
    State state = State::Free;
    // Only an eligible tag may match. A tag added while software had not yet
    // seen every unexpected message could match a later message although an
    // earlier (unexpected) one matched it too; it waits for the next sync.
    bool eligible = false;
    uint64_t tag = 0, mask = 0;
    uint64_t recv_wr_id = 0;
    uint32_t num_sge = 0;
    shm::Sge sge[limits::kTmMaxSge]{};
    // Names one use of the slot in the wr_id of the rendezvous WQEs, so a
    // completion of an earlier use (or a WQE a client forged) is not taken
    // for this one.
    uint32_t cookie = 0;
};

struct TagMatching {
    uint32_t max_num_tags = 0, max_ops = 0;
    std::vector<TaggedBuffer> slots; // index = the handle ibv_post_srq_ops returns
    std::deque<uint32_t> order;      // listed handles, oldest first: matching goes in posting order
    // 16 bits, like the counters of mlx5 hardware (the application's
    // unexpected_cnt is compared modulo 2^16).
    uint16_t hw_unexpected = 0; // messages found unexpected
    uint16_t sw_unexpected = 0; // what software last reported with IBV_OPS_TM_SYNC
    uint32_t next_cookie = 1;
    bool in_sync() const { return hw_unexpected == sw_unexpected; }
};

} // namespace simhca
