// SPDX-License-Identifier: BSD-3-Clause
// `simhca-ctl fault delay NODE MS`: traffic to and from a node arrives late
// but in order; a delay beyond the ACK timeout makes the transport resend
// (a late ACK of the first transmission still completes the WQE, as the
// PSN would on real RC), and beyond the whole retry budget the WQE fails
// with RETRY_EXC_ERR.
#include <chrono>
#include <cstring>

#include "simhca_fixture.hpp"
#include "two_node_fixture.hpp"

using namespace simhca::test;

namespace {

uint8_t pattern(int round, int side, size_t i) { return uint8_t(round * 31 + side * 7 + i); }

} // namespace

TEST_F(TwoNode, FaultDelayRejectsBadArguments) {
    EXPECT_NE(ctl(0, "fault delay nb 2>/dev/null"), 0);       // no MS
    EXPECT_NE(ctl(0, "fault delay nb 0 2>/dev/null"), 0);     // 0 is not a delay
    EXPECT_NE(ctl(0, "fault delay nb 12x 2>/dev/null"), 0);   // not a number
    EXPECT_NE(ctl(0, "fault delay nowhere 5 2>/dev/null"), 0); // no such node
    EXPECT_EQ(ctl(0, "fault undelay nb"), 0);                  // nothing to undo is fine
}

TEST_F(TwoNode, DelayedPingPongCompletesInOrderWithData) {
    ibv_qp *a, *b;
    rc_pair(a, b); // ACK timeout 67 ms: a 5 ms delay each way stays well inside it
    constexpr int kRounds = 20, kDelayMs = 5;
    constexpr size_t kLen = 3000;
    ASSERT_EQ(ctl(0, "fault delay nb " + std::to_string(kDelayMs)), 0);
    auto start = std::chrono::steady_clock::now();
    uint8_t *abuf = buf[0].data(), *bbuf = buf[1].data();
    for (int r = 0; r < kRounds; ++r) {
        ASSERT_EQ(post_recv_simple(b, mr[1], bbuf, kLen, 100 + r), 0);
        ASSERT_EQ(post_recv_simple(a, mr[0], abuf + 200000, kLen, 200 + r), 0);
        for (size_t i = 0; i < kLen; ++i) abuf[i] = pattern(r, 0, i);
        ASSERT_EQ(post_send_simple(a, mr[0], abuf, kLen, r), 0);
        ibv_wc wc;
        ASSERT_EQ(poll_n(cq[1], &wc, 1), 1); // ping arrived at b
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        ASSERT_EQ(wc.wr_id, uint64_t(100 + r));
        ASSERT_EQ(wc.byte_len, kLen);
        for (size_t i = 0; i < kLen; ++i) ASSERT_EQ(bbuf[i], pattern(r, 0, i)) << "round " << r << " byte " << i;
        for (size_t i = 0; i < kLen; ++i) bbuf[100000 + i] = pattern(r, 1, i);
        ASSERT_EQ(post_send_simple(b, mr[1], bbuf + 100000, kLen, 300 + r), 0);
        ibv_wc two[2];
        ASSERT_EQ(poll_n(cq[0], two, 2), 2); // a's send completion and the pong
        ASSERT_EQ(two[0].status, IBV_WC_SUCCESS);
        ASSERT_EQ(two[1].status, IBV_WC_SUCCESS);
        ASSERT_EQ(two[0].wr_id + two[1].wr_id, uint64_t(r + 200 + r));
        for (size_t i = 0; i < kLen; ++i) ASSERT_EQ(abuf[200000 + i], pattern(r, 1, i)) << "round " << r;
        ASSERT_EQ(poll_n(cq[1], &wc, 1), 1); // b's send completion
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        ASSERT_EQ(wc.wr_id, uint64_t(300 + r));
    }
    // A lower bound only (a loaded machine is slower, never faster): each
    // round crosses the delayed link once each way.
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    EXPECT_GE(ms.count(), kRounds * 2 * kDelayMs);
    ASSERT_EQ(ctl(0, "fault undelay nb"), 0);

    // Many sends in flight at once keep their order through the delay line.
    ASSERT_EQ(ctl(0, "fault delay nb 3"), 0);
    constexpr int kN = 40;
    for (int i = 0; i < kN; ++i) ASSERT_EQ(post_recv_simple(b, mr[1], bbuf + i * 8, 8, i), 0);
    for (int i = 0; i < kN; ++i) {
        uint32_t v = 0xabc00000u + uint32_t(i);
        std::memcpy(abuf + 400000 + i * 8, &v, 4);
        ASSERT_EQ(post_send_simple(a, mr[0], abuf + 400000 + i * 8, 4, 1000 + i), 0);
    }
    for (int i = 0; i < kN; ++i) {
        ibv_wc wc;
        ASSERT_EQ(poll_n(cq[1], &wc, 1), 1);
        EXPECT_EQ(wc.wr_id, uint64_t(i));
        uint32_t v;
        std::memcpy(&v, bbuf + i * 8, 4);
        EXPECT_EQ(v, 0xabc00000u + uint32_t(i));
        ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.wr_id, uint64_t(1000 + i));
    }
    ASSERT_EQ(ctl(0, "fault restore nb"), 0); // restore clears a delay too
}

TEST_F(TwoNode, DelayBeyondAckTimeoutResendsAndLateAckCompletes) {
    ibv_qp *a, *b;
    rc_pair(a, b, 7, 14); // ACK timeout 67 ms, 7 retries: 0.5 s in all
    // 40 ms each way: every reply comes after the ACK timeout, so the
    // requester resends; the late ACK of the first transmission completes it.
    ASSERT_EQ(ctl(0, "fault delay nb 40"), 0);
    constexpr int kN = 3;
    for (int i = 0; i < kN; ++i) ASSERT_EQ(post_recv_simple(b, mr[1], buf[1].data() + i * 64, 64, i), 0);
    for (int i = 0; i < kN; ++i) {
        std::memset(buf[0].data() + i * 64, 0x50 + i, 64);
        ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data() + i * 64, 64, 10 + i), 0);
    }
    ibv_wc wc[kN];
    ASSERT_EQ(poll_n(cq[0], wc, kN), kN);
    for (int i = 0; i < kN; ++i) {
        EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc[i].status);
        EXPECT_EQ(wc[i].wr_id, uint64_t(10 + i));
    }
    ASSERT_EQ(poll_n(cq[1], wc, kN), kN);
    for (int i = 0; i < kN; ++i) {
        EXPECT_EQ(wc[i].wr_id, uint64_t(i));
        EXPECT_EQ(buf[1][i * 64 + 63], 0x50 + i);
    }
    // The resent duplicates were recognised: nothing was delivered twice.
    ASSERT_EQ(post_recv_simple(b, mr[1], buf[1].data() + 4096, 64, 99), 0);
    EXPECT_EQ(poll_n(cq[1], wc, 1, 300), 0);
    ASSERT_EQ(ctl(0, "fault undelay nb"), 0);
}

TEST_F(TwoNode, DelayBeyondRetryBudgetEndsInRetryExceeded) {
    ibv_qp *a, *b;
    rc_pair(a, b, 1, 8); // ACK timeout ~1 ms, one retry: given up after ~2 ms
    ASSERT_EQ(ctl(0, "fault delay nb 2000"), 0);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data(), 16, 8), 0);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data(), 16, 9), 0);
    ibv_wc two[2];
    ASSERT_EQ(poll_n(cq[0], two, 2), 2);
    EXPECT_EQ(two[0].wr_id, 8u);
    EXPECT_EQ(two[0].status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(two[0].status);
    EXPECT_EQ(two[1].wr_id, 9u);
    EXPECT_EQ(two[1].status, IBV_WC_WR_FLUSH_ERR);
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(a, &attr, IBV_QP_STATE, &init), 0);
    EXPECT_EQ(attr.qp_state, IBV_QPS_ERR);
    // Clearing the delay releases what waited; the late answers find the QP
    // in ERR and change nothing.
    ASSERT_EQ(ctl(0, "fault restore nb"), 0);
    EXPECT_EQ(poll_n(cq[0], two, 1, 200), 0);
}
