// SPDX-License-Identifier: BSD-3-Clause
// Data path on one node: SEND/RECV, RDMA write/read, atomics, RNR NAK retry
// and exhaustion, remote access errors, flush on error, SRQ limit events.
#include <cstring>
#include <poll.h>
#include <thread>
#include <vector>

#include "simhca_fixture.hpp"

using namespace simhca::test;

namespace {

class DataPath : public DaemonTest {
protected:
    void SetUp() override {
        DaemonTest::SetUp();
        buf.assign(1 << 16, 0);
        mr = ibv_reg_mr(pd, buf.data(), buf.size(),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                            IBV_ACCESS_REMOTE_ATOMIC);
        ASSERT_NE(mr, nullptr);
    }
    void pair(uint8_t rnr_retry = 7, uint8_t min_rnr = 1) {
        a = create_rc(pd, cq);
        b = create_rc(pd, cq);
        ASSERT_TRUE(a && b);
        ASSERT_EQ(connect_qp(a, b->qp_num, rnr_retry, min_rnr), 0);
        ASSERT_EQ(connect_qp(b, a->qp_num, rnr_retry, min_rnr), 0);
    }
    uint8_t *at(size_t off) { return buf.data() + off; }
    std::vector<uint8_t> buf;
    ibv_mr *mr = nullptr;
    ibv_qp *a = nullptr, *b = nullptr;
};

TEST_F(DataPath, SendRecvMovesTheBytes) {
    pair();
    for (int i = 0; i < 3000; ++i) at(i)[0] = 0, at(8192 + i)[0] = uint8_t(i * 7);
    ASSERT_EQ(post_recv_simple(b, mr, at(0), 4096, 11), 0);
    ASSERT_EQ(post_send_simple(a, mr, at(8192), 3000, 22), 0);
    ibv_wc wc[2];
    ASSERT_EQ(poll_n(cq, wc, 2), 2);
    for (auto &w : wc) {
        EXPECT_EQ(w.status, IBV_WC_SUCCESS);
        if (w.wr_id == 11) {
            EXPECT_EQ(w.opcode, IBV_WC_RECV);
            EXPECT_EQ(w.byte_len, 3000u);
            EXPECT_EQ(w.qp_num, b->qp_num);
            EXPECT_EQ(w.src_qp, a->qp_num);
        } else {
            EXPECT_EQ(w.wr_id, 22u);
            EXPECT_EQ(w.opcode, IBV_WC_SEND);
        }
    }
    EXPECT_EQ(std::memcmp(at(0), at(8192), 3000), 0);
}

TEST_F(DataPath, RdmaWriteReadAndAtomics) {
    pair();
    std::memset(at(0), 0xab, 1000);
    ASSERT_EQ(post_send_simple(a, mr, at(0), 1000, 1, IBV_WR_RDMA_WRITE, uint64_t(at(20000)), mr->rkey), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(at(20000)[999], 0xab);
    EXPECT_EQ(at(21000)[0], 0);

    std::memset(at(30000), 0x5c, 512);
    ASSERT_EQ(post_send_simple(a, mr, at(40000), 512, 2, IBV_WR_RDMA_READ, uint64_t(at(30000)), mr->rkey), 0);
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
    EXPECT_EQ(wc.byte_len, 512u);
    EXPECT_EQ(at(40000)[511], 0x5c);

    uint64_t *target = reinterpret_cast<uint64_t *>(at(50000));
    *target = 40;
    ibv_sge sge{uint64_t(at(50008)), 8, mr->lkey};
    ibv_send_wr wr{}, *bad;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.atomic.remote_addr = uint64_t(target);
    wr.wr.atomic.rkey = mr->rkey;
    wr.wr.atomic.compare_add = 2;
    ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(*target, 42u);
    EXPECT_EQ(*reinterpret_cast<uint64_t *>(at(50008)), 40u);
    wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    wr.wr.atomic.compare_add = 42;
    wr.wr.atomic.swap = 7;
    ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_COMP_SWAP);
    EXPECT_EQ(*target, 7u);
}

TEST_F(DataPath, RnrThenSuccessAfterLatePost) {
    pair(7, 14); // infinite RNR retries, 1.28 ms back-off
    std::memcpy(at(100), "late receive", 13);
    ASSERT_EQ(post_send_simple(a, mr, at(100), 13, 5), 0);
    ibv_wc wc;
    EXPECT_EQ(poll_n(cq, &wc, 1, 50), 0); // nothing yet: the responder NAKs
    ASSERT_EQ(post_recv_simple(b, mr, at(200), 64, 6), 0);
    ibv_wc two[2];
    ASSERT_EQ(poll_n(cq, two, 2), 2);
    for (auto &w : two) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    EXPECT_STREQ(reinterpret_cast<char *>(at(200)), "late receive");
}

TEST_F(DataPath, RnrExhaustionFailsAndFlushes) {
    pair(2, 1);
    ASSERT_EQ(post_send_simple(a, mr, at(0), 8, 1), 0);
    ASSERT_EQ(post_send_simple(a, mr, at(0), 8, 2), 0);
    ibv_wc wc[2];
    ASSERT_EQ(poll_n(cq, wc, 2), 2);
    EXPECT_EQ(wc[0].wr_id, 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
    EXPECT_EQ(wc[1].wr_id, 2u);
    EXPECT_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
    ibv_qp_attr qa{};
    ibv_qp_init_attr ia{};
    ASSERT_EQ(ibv_query_qp(a, &qa, IBV_QP_STATE, &ia), 0);
    EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
}

TEST_F(DataPath, BadRkeyIsRemoteAccessError) {
    pair();
    ASSERT_EQ(post_send_simple(a, mr, at(0), 64, 1, IBV_WR_RDMA_WRITE, uint64_t(at(0)), mr->rkey ^ 0x1000), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    // Out of bounds with the right key is an access error too (on a fresh pair).
    pair();
    ASSERT_EQ(post_send_simple(a, mr, at(0), 64, 2, IBV_WR_RDMA_WRITE, uint64_t(at(buf.size() - 8)), mr->rkey), 0);
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(DataPath, ReceiveTooSmallIsLocalLengthError) {
    pair();
    ASSERT_EQ(post_recv_simple(b, mr, at(0), 16, 1), 0);
    ASSERT_EQ(post_send_simple(a, mr, at(100), 64, 2), 0);
    ibv_wc wc[2];
    ASSERT_EQ(poll_n(cq, wc, 2), 2);
    for (auto &w : wc) {
        if (w.wr_id == 1) EXPECT_EQ(w.status, IBV_WC_LOC_LEN_ERR);
        else EXPECT_EQ(w.status, IBV_WC_REM_INV_REQ_ERR);
    }
}

TEST_F(DataPath, ModifyToErrFlushesReceives) {
    pair();
    for (int i = 0; i < 3; ++i) ASSERT_EQ(post_recv_simple(b, mr, at(i * 64), 64, 100 + i), 0);
    ibv_qp_attr e{};
    e.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(b, &e, IBV_QP_STATE), 0);
    ibv_wc wc[3];
    ASSERT_EQ(poll_n(cq, wc, 3), 3);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
        EXPECT_EQ(wc[i].wr_id, uint64_t(100 + i));
    }
    // Receives posted after the error are flushed too.
    ASSERT_EQ(post_recv_simple(b, mr, at(0), 64, 200), 0);
    ASSERT_EQ(poll_n(cq, wc, 1), 1);
    EXPECT_EQ(wc[0].wr_id, 200u);
    EXPECT_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(DataPath, SrqLimitEventFiresOnceAndCompletionChannelWorks) {
    ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    ASSERT_NE(ch, nullptr);
    ibv_cq *ecq = ibv_create_cq(ctx, 64, this, ch, 0);
    ASSERT_NE(ecq, nullptr);
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 16;
    sa.attr.max_sge = 1;
    ibv_srq *srq = ibv_create_srq(pd, &sa);
    ASSERT_NE(srq, nullptr);
    ibv_qp *r = create_rc(pd, ecq, srq);
    ibv_qp *s = create_rc(pd, cq);
    ASSERT_TRUE(r && s);
    ASSERT_EQ(connect_qp(s, r->qp_num), 0);
    ASSERT_EQ(connect_qp(r, s->qp_num), 0);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(post_srq_recv_simple(srq, mr, at(i * 128), 128, i), 0);
    ibv_srq_attr lim{};
    lim.srq_limit = 3;
    ASSERT_EQ(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT), 0);
    ASSERT_EQ(ibv_req_notify_cq(ecq, 0), 0);
    ASSERT_EQ(post_send_simple(s, mr, at(4096), 32, 77), 0);
    ASSERT_EQ(post_send_simple(s, mr, at(4096), 32, 78), 0);

    pollfd pf{ch->fd, POLLIN, 0};
    ASSERT_EQ(poll(&pf, 1, 5000), 1); // the channel fd is really pollable
    ibv_cq *ev_cq;
    void *ev_ctx;
    ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
    EXPECT_EQ(ev_cq, ecq);
    EXPECT_EQ(ev_ctx, this);
    ibv_ack_cq_events(ecq, 1);
    ibv_wc wc[2];
    ASSERT_EQ(poll_n(ecq, wc, 2), 2);
    EXPECT_EQ(wc[0].qp_num, r->qp_num);

    pollfd af{ctx->async_fd, POLLIN, 0};
    ASSERT_EQ(poll(&af, 1, 5000), 1);
    ibv_async_event ev;
    ASSERT_EQ(ibv_get_async_event(ctx, &ev), 0);
    EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
    EXPECT_EQ(ev.element.srq, srq);
    ibv_ack_async_event(&ev);
    EXPECT_EQ(poll(&af, 1, 50), 0); // one event per arming
    ibv_srq_attr q{};
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.srq_limit, 0u); // disarmed
    ibv_wc sw[2];
    ASSERT_EQ(poll_n(cq, sw, 2), 2);
    EXPECT_EQ(ibv_destroy_qp(r), 0);
    EXPECT_EQ(ibv_destroy_qp(s), 0);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
    EXPECT_EQ(ibv_destroy_cq(ecq), 0);
    EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

TEST_F(DataPath, BusyObjectsCannotBeDestroyed) {
    pair();
    EXPECT_EQ(ibv_destroy_cq(cq), EBUSY);
    EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
    EXPECT_EQ(ibv_destroy_qp(a), 0);
    EXPECT_EQ(ibv_destroy_qp(b), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    mr = nullptr;
}

} // namespace

// Large local transfers are copied in chunks by two threads (daemon/parallel_copy.cpp): every byte must
// still land once and in place, whatever the SGE boundaries, and an RDMA WRITE's last bytes with the rest.
TEST_F(DataPath, LargeSendAndWriteArriveWhole) {
    pair();
    constexpr size_t kLen = (1 << 20) + 12345; // not a multiple of the copy chunk
    std::vector<uint8_t> big(3 * kLen + 4096, 0);
    ibv_mr *bmr = ibv_reg_mr(pd, big.data(), big.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(bmr, nullptr);
    uint8_t *src = big.data(), *dst = big.data() + kLen + 100, *wdst = big.data() + 2 * kLen + 200;
    for (size_t i = 0; i < kLen; ++i) src[i] = uint8_t(i * 131 + (i >> 16));
    // SEND: two gather SGEs, three scatter SGEs, split at other places.
    ibv_sge rs[3] = {{uint64_t(dst), 70001, bmr->lkey},
                     {uint64_t(dst + 70001), 600000, bmr->lkey},
                     {uint64_t(dst + 670001), uint32_t(kLen - 670001), bmr->lkey}};
    ibv_recv_wr rwr{}, *rbad;
    rwr.wr_id = 1;
    rwr.sg_list = rs;
    rwr.num_sge = 3;
    ASSERT_EQ(ibv_post_recv(b, &rwr, &rbad), 0);
    ibv_sge ss[2] = {{uint64_t(src), 300007, bmr->lkey}, {uint64_t(src + 300007), uint32_t(kLen - 300007), bmr->lkey}};
    ibv_send_wr swr{}, *sbad;
    swr.wr_id = 2;
    swr.sg_list = ss;
    swr.num_sge = 2;
    swr.opcode = IBV_WR_SEND;
    swr.send_flags = IBV_SEND_SIGNALED;
    ASSERT_EQ(ibv_post_send(a, &swr, &sbad), 0);
    ibv_wc wc[2];
    ASSERT_EQ(poll_n(cq, wc, 2), 2);
    for (auto &w : wc) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(src, dst, kLen), 0);
    // RDMA WRITE of the same bytes.
    swr.wr_id = 3;
    swr.opcode = IBV_WR_RDMA_WRITE;
    swr.wr.rdma.remote_addr = uint64_t(wdst);
    swr.wr.rdma.rkey = bmr->rkey;
    ASSERT_EQ(ibv_post_send(a, &swr, &sbad), 0);
    ASSERT_EQ(poll_n(cq, wc, 1), 1);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(std::memcmp(src, wdst, kLen), 0);
    EXPECT_EQ(wdst[kLen], 0); // nothing beyond the message
    EXPECT_EQ(ibv_dereg_mr(bmr), 0);
}
