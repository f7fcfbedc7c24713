// SPDX-License-Identifier: BSD-3-Clause
// The sentences that name a failed operation: what it was, how it failed, what that implies.
#include "src/core/operation_text.h"

#include <gtest/gtest.h>

namespace {

ibv_send_wr operation(ibv_wr_opcode opcode, ibv_sge &sge) {
    ibv_send_wr wr{};
    wr.opcode = opcode;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return wr;
}

}  // namespace

TEST(OperationText, NamesKindSizeAndRemoteAddress) {
    ibv_sge sge{0, 4096, 0};
    ibv_send_wr wr = operation(IBV_WR_RDMA_READ, sge);
    wr.wr.rdma.remote_addr = 0x7f31c4a01000;
    EXPECT_EQ(xrc::describe_operation(wr), "RDMA read of 4096 bytes at 0x7f31c4a01000");
    wr.opcode = IBV_WR_RDMA_WRITE;
    EXPECT_EQ(xrc::describe_operation(wr), "RDMA write of 4096 bytes at 0x7f31c4a01000");
    wr = operation(IBV_WR_ATOMIC_CMP_AND_SWP, sge);
    wr.wr.atomic.remote_addr = 0x1000;
    EXPECT_EQ(xrc::describe_operation(wr), "atomic compare-and-swap at 0x1000");
    EXPECT_TRUE(xrc::is_atomic(wr));
    sge.length = 64;
    wr = operation(IBV_WR_SEND_WITH_IMM, sge);
    EXPECT_EQ(xrc::describe_operation(wr), "send of 64 bytes");
    EXPECT_FALSE(xrc::is_atomic(wr));
}

TEST(OperationText, AOneSidedOperationLostWithItsRailSaysWhyTheJobEnds) {
    ibv_sge sge{0, 8, 0};
    ibv_send_wr wr = operation(IBV_WR_ATOMIC_FETCH_AND_ADD, sge);
    EXPECT_EQ(xrc::one_sided_rail_failure(wr, IBV_WC_RETRY_EXC_ERR),
              std::string("an atomic fetch-and-add failed with its rail (") + ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR) +
                  "): it may have executed, so it is not sent again, and no other rail reaches the window it targets");
    wr = operation(IBV_WR_RDMA_WRITE, sge);
    wr.wr.rdma.remote_addr = 0x2000;
    const std::string text = xrc::one_sided_rail_failure(wr, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(text.rfind("RDMA write of 8 bytes at 0x2000 of a one-sided window failed with its rail (", 0), 0u)
        << text;
    EXPECT_NE(text.find("registered on this rail only"), std::string::npos);
}

TEST(OperationText, AFailedCompletionNamesStatusPortAndRefusal) {
    ibv_wc wc{};
    wc.status = IBV_WC_RETRY_EXC_ERR;
    wc.vendor_err = 0x81;
    const std::string plain = xrc::failed_completion_text("send of 64 bytes", wc, std::nullopt, 3, "INI QP 0x12");
    EXPECT_EQ(plain, std::string("send of 64 bytes failed: ") + ibv_wc_status_str(wc.status) + " (vendor error 0x81)");
    const std::string down = xrc::failed_completion_text("x", wc, IBV_PORT_DOWN, 3, "INI QP 0x12");
    EXPECT_NE(down.find(std::string("; the port is not active (") + ibv_port_state_str(IBV_PORT_DOWN) + ")"),
              std::string::npos)
        << down;
    EXPECT_EQ(down.find("responder"), std::string::npos);
    wc.status = IBV_WC_REM_INV_REQ_ERR;
    const std::string refused = xrc::failed_completion_text("x", wc, std::nullopt, 3, "INI QP 0x12");
    EXPECT_NE(refused.find("; the responder refused it: this rank (3) sent it on its INI QP 0x12, and that TGT QP is "
                           "now in the error state"),
              std::string::npos)
        << refused;
}
