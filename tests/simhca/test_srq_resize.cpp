// SPDX-License-Identifier: BSD-3-Clause
// ibv_modify_srq with IBV_SRQ_MAX_WR: the ring grows or shrinks (the device
// advertises IBV_DEVICE_SRQ_RESIZE), the WQEs already posted survive in order,
// fewer entries than are posted (or than an armed limit) is EINVAL, and
// IBV_SRQ_LIMIT keeps working across a resize.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <poll.h>
#include <vector>

#include "simhca_fixture.hpp"

using namespace simhca::test;

namespace {

class SrqResize : public DaemonTest {
protected:
    void SetUp() override {
        DaemonTest::SetUp();
        buf.assign(1 << 18, 0);
        mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
        ASSERT_NE(mr, nullptr);
        rcq = ibv_create_cq(ctx, 512, nullptr, nullptr, 0);
        ASSERT_NE(rcq, nullptr);
    }
    ibv_srq *make_srq(uint32_t max_wr) {
        ibv_srq_init_attr sa{};
        sa.attr.max_wr = max_wr;
        sa.attr.max_sge = 1;
        return ibv_create_srq(pd, &sa);
    }
    // An RC pair whose receiver takes its receives from `srq` (completions on rcq).
    void connect_to(ibv_srq *srq) {
        r = create_rc(pd, rcq, srq);
        s = create_rc(pd, cq, nullptr, 64);
        ASSERT_TRUE(r && s);
        ASSERT_EQ(connect_qp(s, r->qp_num), 0);
        ASSERT_EQ(connect_qp(r, s->qp_num), 0);
    }
    uint8_t *slot(int i) { return buf.data() + size_t(i) * 256; }       // receive buffers
    uint8_t *src(int i) { return buf.data() + 131072 + size_t(i) * 256; } // send buffers
    int post(ibv_srq *srq, int i) { return post_srq_recv_simple(srq, mr, slot(i), 256, uint64_t(i)); }
    // Sends n messages with distinct contents and checks that receive k
    // (wr_id first + k) got message k.
    void send_and_check(int first, int n) {
        for (int k = 0; k < n; ++k) {
            std::memset(src(k), 0, 256);
            std::snprintf(reinterpret_cast<char *>(src(k)), 64, "message %d of %d", k, n);
            ASSERT_EQ(post_send_simple(s, mr, src(k), 64, uint64_t(1000 + k)), 0);
            ibv_wc wc;
            ASSERT_EQ(poll_n(cq, &wc, 1), 1);
            ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
            ASSERT_EQ(poll_n(rcq, &wc, 1), 1);
            ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
            ASSERT_EQ(wc.wr_id, uint64_t(first + k)); // FIFO across the resize
            ASSERT_STREQ(reinterpret_cast<char *>(slot(first + k)), reinterpret_cast<char *>(src(k)));
        }
    }
    std::vector<uint8_t> buf;
    ibv_mr *mr = nullptr;
    ibv_cq *rcq = nullptr;
    ibv_qp *r = nullptr, *s = nullptr;
};

TEST_F(SrqResize, DeviceAdvertisesIt) {
    ibv_device_attr a{};
    ASSERT_EQ(ibv_query_device(ctx, &a), 0);
    EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_SRQ_RESIZE);
}

TEST_F(SrqResize, GrowKeepsPostedWqesInOrder) {
    ibv_srq *srq = make_srq(4);
    ASSERT_NE(srq, nullptr);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(post(srq, i), 0);
    EXPECT_EQ(post(srq, 4), ENOMEM) << "the ring of 4 is full";
    ibv_srq_attr a{};
    a.max_wr = 100;
    ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), 0);
    ibv_srq_attr q{};
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.max_wr, 100u);
    for (int i = 4; i < 100; ++i) ASSERT_EQ(post(srq, i), 0) << i;
    connect_to(srq);
    send_and_check(0, 100);
    EXPECT_EQ(ibv_destroy_qp(r), 0);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

TEST_F(SrqResize, ShrinkKeepsPostedButNeverBelowThem) {
    ibv_srq *srq = make_srq(64);
    ASSERT_NE(srq, nullptr);
    for (int i = 0; i < 6; ++i) ASSERT_EQ(post(srq, i), 0);
    ibv_srq_attr a{};
    a.max_wr = 5;
    EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL); // 6 are posted
    a.max_wr = 0;
    EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL);
    ibv_device_attr d{};
    ASSERT_EQ(ibv_query_device(ctx, &d), 0);
    a.max_wr = uint32_t(d.max_srq_wr) + 1;
    EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL);
    a.max_wr = 8;
    ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), 0);
    ASSERT_EQ(post(srq, 6), 0);
    ASSERT_EQ(post(srq, 7), 0);
    EXPECT_EQ(post(srq, 8), ENOMEM) << "the ring now holds 8";
    connect_to(srq);
    send_and_check(0, 8);
    EXPECT_EQ(ibv_destroy_qp(r), 0);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

TEST_F(SrqResize, LimitSurvivesResizeAndStillFires) {
    ibv_srq *srq = make_srq(16);
    ASSERT_NE(srq, nullptr);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(post(srq, i), 0);
    ibv_srq_attr a{};
    a.srq_limit = 6;
    ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), 0);
    a.max_wr = 5; // below the armed limit (rxe's rule), though above nothing else
    EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), EINVAL);
    a.max_wr = 32;
    a.srq_limit = 40; // a limit above the new size
    EXPECT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), EINVAL);
    ibv_srq_attr q{};
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.max_wr, 16u); // a failed modify changed nothing
    EXPECT_EQ(q.srq_limit, 6u);
    ASSERT_EQ(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR), 0); // resize only: the limit stays armed
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.max_wr, 32u);
    EXPECT_EQ(q.srq_limit, 6u);
    connect_to(srq);
    send_and_check(0, 2); // 8 -> 6 posted: not below the limit yet
    pollfd af{ctx->async_fd, POLLIN, 0};
    EXPECT_EQ(poll(&af, 1, 50), 0);
    send_and_check(2, 1); // 5 < 6: fires
    ASSERT_EQ(poll(&af, 1, 5000), 1);
    ibv_async_event ev;
    ASSERT_EQ(ibv_get_async_event(ctx, &ev), 0);
    EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
    EXPECT_EQ(ev.element.srq, srq);
    ibv_ack_async_event(&ev);
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.srq_limit, 0u); // disarmed after firing
    EXPECT_EQ(ibv_destroy_qp(r), 0);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

} // namespace
