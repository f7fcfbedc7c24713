// SPDX-License-Identifier: BSD-3-Clause
// The port counter local_ack_timeout_err (sysfs ports/1/hw_counters, as mlx5 names it, and simhca-ctl
// counters): one count per retransmission after the requester's ACK timer ran out, nothing for traffic that
// was answered (RNR NAKs included), nothing at the responder.
#include <unistd.h>

#include "simhca_fixture.hpp"
#include "two_node_fixture.hpp"

using namespace simhca::test;

namespace {
constexpr const char *kAckTimeouts = "local_ack_timeout_err";
}

TEST_F(TwoNode, AckTimeoutCounterStartsAtZeroInSysfsAndCtl) {
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(counter_file(i, kAckTimeouts), 0) << "node " << i;
        EXPECT_EQ(counter_ctl(i, kAckTimeouts), 0) << "node " << i;
    }
}

// The BTL's trap on a real fabric: a message reaches a TGT QP that is not ready yet. The responder drops it,
// the requester hears nothing, and each retransmission after an ACK timeout is counted; the last expiry ends
// the WR instead.
TEST_F(TwoNode, SendToANotReadyTgtQpCountsOneAckTimeoutPerRetransmission) {
    Xrc x;
    ASSERT_NO_FATAL_FAILURE(xrc_pair(x, /*ready_tgt=*/false, /*retry_cnt=*/3, /*timeout=*/8));  // ~1 ms each
    ASSERT_EQ(post_srq_recv_simple(x.srq, mr[1], buf[1].data(), 128, 42), 0);
    ASSERT_EQ(post_send_simple(x.ini, mr[0], buf[0].data(), 16, 1, IBV_WR_SEND, 0, 0, x.srqn), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(counter_file(0, kAckTimeouts), 3);
    EXPECT_EQ(counter_ctl(0, kAckTimeouts), 3);
    EXPECT_EQ(counter_file(1, kAckTimeouts), 0);  // the responder's port counts nothing
    EXPECT_EQ(poll_n(cq[1], &wc, 1, 50), 0);      // and nothing was delivered
    close(x.fd);
}

TEST_F(TwoNode, LostTrafficCountsEachRetransmission) {
    ibv_qp *a, *b;
    rc_pair(a, b, 2, 8);  // ACK timeout ~1 ms, 2 retries
    ASSERT_EQ(ctl(0, "fault drop nb"), 0);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data(), 16, 7), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    ASSERT_EQ(ctl(0, "fault restore nb"), 0);
    EXPECT_EQ(counter_file(0, kAckTimeouts), 2);
    EXPECT_EQ(counter_ctl(0, kAckTimeouts), 2);
}

// Answered traffic never counts: a send that meets no posted receive is RNR-NAKed and retried (rnr_retry 7)
// until the receive is there; sends, RDMA and atomics that are acknowledged at once leave the counter alone.
TEST_F(TwoNode, AnsweredTrafficAndRnrNaksCountNoAckTimeout) {
    ibv_qp *a, *b;
    // An ACK timeout (~1 s) far above any answer's delay, even on a loaded machine: an expiry counted here would
    // be a miscount, not a slow answer.
    rc_pair(a, b, 7, 18);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data(), 64, 1), 0);
    ibv_wc wc;
    EXPECT_EQ(poll_n(cq[0], &wc, 1, 20), 0);  // RNR NAKed, waiting for a receive
    ASSERT_EQ(post_recv_simple(b, mr[1], buf[1].data(), 64, 2), 0);
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(poll_n(cq[1], &wc, 1), 1);
    for (int i = 0; i < 32; ++i) {
        ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data(), 4096, 10 + i, IBV_WR_RDMA_WRITE,
                                   reinterpret_cast<uintptr_t>(buf[1].data()), mr[1]->rkey),
                  0);
        ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    }
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(counter_file(i, kAckTimeouts), 0) << "node " << i;
        EXPECT_EQ(counter_ctl(i, kAckTimeouts), 0) << "node " << i;
    }
}
