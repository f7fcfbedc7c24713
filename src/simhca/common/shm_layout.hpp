// SPDX-License-Identifier: BSD-3-Clause
// Layout of the shared-memory queues (memfd, mapped by daemon and library).
// This is the "hardware" interface: the library writes WQEs and rings the
// doorbell, the daemon consumes them and writes CQEs. Everything here is
// read by both sides, so it is plain old data with explicit sizes; the
// daemon copies an entry out before validating it (the client may scribble).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace simhca::shm {

constexpr uint32_t kMaxSge = 16;
constexpr uint32_t kSendWqeSize = 512;
constexpr uint32_t kSendHdrSize = 128;
constexpr uint32_t kMaxInline = kSendWqeSize - kSendHdrSize; // 384
constexpr uint32_t kRecvWqeSize = 16 + 16 * kMaxSge;         // 272
constexpr uint32_t kCqeSize = 64;

// Producer/consumer indices live on separate cache lines: the library and
// the daemon write different ones.
struct alignas(64) RingCtl {
    std::atomic<uint32_t> head; // producer index (free running)
    uint8_t pad0[60];
    std::atomic<uint32_t> tail; // consumer index (free running)
    uint8_t pad1[60];
};
static_assert(sizeof(RingCtl) == 128);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

struct Sge {
    uint64_t addr;
    uint32_t length;
    uint32_t lkey;
};

// Our own copy of the address vector (UD work requests carry one).
struct Av {
    uint16_t dlid;
    uint8_t sl;
    uint8_t src_path_bits;
    uint8_t is_global;
    uint8_t port_num;
    uint8_t sgid_index;
    uint8_t hop_limit;
    uint8_t dgid[16];
    uint32_t flow_label;
    uint8_t traffic_class;
    uint8_t pad[3];
};

struct SendWqe {
    uint64_t wr_id;
    uint32_t opcode;     // enum ibv_wr_opcode
    uint32_t send_flags; // enum ibv_send_flags
    uint32_t imm_data;   // network order, as the app gave it
    uint32_t num_sge;    // ignored when IBV_SEND_INLINE
    uint32_t inline_len;
    uint32_t remote_srqn; // XRC
    uint64_t remote_addr;
    uint32_t rkey;
    uint32_t remote_qpn; // UD
    uint64_t compare_add;
    uint64_t swap;
    uint32_t remote_qkey; // UD
    uint32_t pad;
    Av av; // UD
    uint8_t hdr_pad[kSendHdrSize - 72 - sizeof(Av)];
    union {
        Sge sge[kMaxSge];
        uint8_t inline_data[kMaxInline];
    };
};
static_assert(sizeof(SendWqe) == kSendWqeSize);
static_assert(offsetof(SendWqe, sge) == kSendHdrSize);

struct RecvWqe {
    uint64_t wr_id;
    uint32_t num_sge;
    uint32_t pad;
    Sge sge[kMaxSge];
};
static_assert(sizeof(RecvWqe) == kRecvWqeSize);

struct Cqe {
    uint64_t wr_id;
    uint32_t status; // enum ibv_wc_status
    uint32_t opcode; // enum ibv_wc_opcode
    uint32_t vendor_err;
    uint32_t byte_len;
    uint32_t imm_data; // network order
    uint32_t qp_num;
    uint32_t src_qp;
    uint32_t wc_flags;
    uint16_t pkey_index;
    uint16_t slid;
    uint8_t sl;
    uint8_t dlid_path_bits;
    uint8_t pad[2];
    uint64_t tm_tag;  // tag matching: the TMH's tag (ibv_wc_tm_info.tag), host order
    uint32_t tm_priv; // ... and its app_ctx (ibv_wc_tm_info.priv), host order
    uint8_t pad2[4];
};
static_assert(sizeof(Cqe) == kCqeSize);

// A QP region: control block, then the SQ entries, then the RQ entries.
struct QpCtl {
    RingCtl sq;
    RingCtl rq;
    // Set by the daemon when the QP is in ERR: then post_recv must ring the
    // doorbell so that the new WQEs get flushed promptly.
    std::atomic<uint32_t> in_error;
    uint8_t pad[60];
};
constexpr size_t kQpSqOffset = sizeof(QpCtl);
inline size_t qp_region_size(uint32_t sq_entries, uint32_t rq_entries) {
    return kQpSqOffset + size_t(sq_entries) * kSendWqeSize + size_t(rq_entries) * kRecvWqeSize;
}
inline size_t qp_rq_offset(uint32_t sq_entries) {
    return kQpSqOffset + size_t(sq_entries) * kSendWqeSize;
}

struct SrqCtl {
    RingCtl rq;
};
constexpr size_t kSrqEntriesOffset = sizeof(SrqCtl);
inline size_t srq_region_size(uint32_t entries) {
    return kSrqEntriesOffset + size_t(entries) * kRecvWqeSize;
}

struct CqCtl {
    RingCtl ring; // daemon produces, library consumes
    // Armed by ibv_req_notify_cq (1 = next completion, 2 = solicited only);
    // the daemon exchanges it to 0 when it signals the completion channel.
    std::atomic<uint32_t> armed;
    uint8_t pad[60];
};
constexpr size_t kCqEntriesOffset = sizeof(CqCtl);
inline size_t cq_region_size(uint32_t entries) {
    return kCqEntriesOffset + size_t(entries) * kCqeSize;
}

inline uint32_t round_up_pow2(uint32_t v) {
    uint32_t r = 1;
    while (r < v) r <<= 1;
    return r;
}

} // namespace simhca::shm
