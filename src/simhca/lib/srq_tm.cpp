// SPDX-License-Identifier: BSD-3-Clause
// ibv_post_srq_ops: tag list operations on a TM SRQ. The daemon holds the
// matching list (daemon/tag_matching.cpp), so each operation is one control
// request; it is executed at once and, when signaled (or failed), completes
// with IBV_WC_TM_ADD / TM_DEL / TM_SYNC in the SRQ's CQ as on mlx5.
#include <cerrno>
#include <cstring>

#include "../common/limits.hpp"
#include "lib.hpp"

namespace simhca::lib {

int post_srq_ops(ibv_srq *srq, ibv_ops_wr *wr, ibv_ops_wr **bad) noexcept {
    if (!srq || !bad) return EINVAL;
    Context *ctx = ctx_of(srq->context);
    for (; wr; wr = wr->next) {
        proto::Request req{};
        proto::Response resp{};
        auto &q = req.tm_op;
        q.srq = srq->handle;
        // A C caller may store any number in the enum; reading it as the enum would be undefined in C++
        // when it is out of range, so read its bytes (the daemon rejects unknown opcodes).
        static_assert(sizeof(wr->opcode) == sizeof(q.opcode));
        std::memcpy(&q.opcode, &wr->opcode, sizeof(q.opcode));
        q.flags = uint32_t(wr->flags);
        q.unexpected_cnt = wr->tm.unexpected_cnt;
        q.handle = wr->tm.handle;
        q.wr_id = wr->wr_id;
        if (q.opcode == IBV_WR_TAG_ADD) {
            if (wr->tm.add.num_sge < 0 || uint32_t(wr->tm.add.num_sge) > limits::kTmMaxSge ||
                (wr->tm.add.num_sge && !wr->tm.add.sg_list)) {
                *bad = wr;
                return EINVAL;
            }
            q.num_sge = uint32_t(wr->tm.add.num_sge);
            for (uint32_t i = 0; i < q.num_sge; ++i) q.sge[i] = wr->tm.add.sg_list[i];
            q.recv_wr_id = wr->tm.add.recv_wr_id;
            q.tag = wr->tm.add.tag;
            q.mask = wr->tm.add.mask;
        }
        if (int e = ctx->conn.call(proto::Op::TmOp, req, resp)) {
            *bad = wr;
            return e;
        }
        if (q.opcode == IBV_WR_TAG_ADD) wr->tm.handle = resp.h.handle;
    }
    return 0;
}

} // namespace simhca::lib
