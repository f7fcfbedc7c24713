// SPDX-License-Identifier: BSD-3-Clause
// What the roles of the data path hand each other (rxe's packet info, without the wire bytes): the
// requester builds a Message from a send WQE, the responder executes it and answers with a Reply, the
// completer applies the Reply to the WQE. network.cpp carries both between daemons in its own explicit
// wire layout, so nothing here is a wire format.
#pragma once
#include <cstddef>
#include <cstdint>
#include <sys/types.h>
#include <sys/uio.h>
#include <vector>

namespace simhca {

// Outcome of a request at the responder (what a real HCA would signal with
// ACK / NAK codes, or by dropping the packet).
enum class RespStatus { Ack, RnrNak, Drop, RemAccess, RemInvReq, RemOp, Discard /* out of sequence */ };

// One "packet" from requester to responder.
struct Message {
    uint32_t opcode;  // ibv_wr_opcode
    uint32_t src_qpn, dst_qpn;
    uint16_t src_lid;
    uint16_t dlid;  // UD: the destination LID (a multicast LID selects the group)
    uint32_t srqn;
    uint64_t remote_addr;
    uint32_t rkey;
    uint32_t imm;
    bool has_imm, solicited;
    bool has_inv;  // SEND_WITH_INV: `imm` is the rkey to invalidate at the responder
    uint64_t compare_add, swap;
    uint32_t length;  // RDMA READ / atomic size
    uint32_t qkey;
    uint64_t stream, seq;  // requester epoch + sequence (0 = local / unsequenced)
    bool has_grh;
    uint8_t grh[40];
    const uint8_t *data = nullptr;                // SEND / WRITE payload (not owned), or
    pid_t src_pid = 0;                            // ... when data is null: the sender's ranges,
    const std::vector<iovec> *src_iov = nullptr;  // read on demand (local only)
    size_t size = 0;
};

struct Reply {
    RespStatus status = RespStatus::Ack;
    uint8_t rnr_timer = 0;         // responder's min_rnr_timer, for RNR NAKs
    std::vector<uint8_t> data;     // atomic result (owned), or
    const uint8_t *ext = nullptr;  // READ data borrowed from a daemon buffer / received frame
    size_t ext_len = 0;
    const uint8_t *bytes() const { return ext ? ext : data.data(); }
    size_t size() const { return ext ? ext_len : data.size(); }
};

}  // namespace simhca
