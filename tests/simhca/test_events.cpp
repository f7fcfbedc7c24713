// SPDX-License-Identifier: BSD-3-Clause
// Async events and less common data-path features: port down/up (PORT_ERR /
// PORT_ACTIVE to every context, sends fail meanwhile), QP_LAST_WQE_REACHED on
// an SRQ-attached QP, CQ overrun (CQ_ERR), UD with and without GRH, RDMA
// write with immediate, CQ resize keeping completions, the ibv_wr_* API.
#include <arpa/inet.h>
#include <cstring>
#include <cstdlib>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "simhca_fixture.hpp"

using namespace simhca::test;

namespace {

class Events : public DaemonTest {
protected:
    void SetUp() override {
        DaemonTest::SetUp();
        buf.assign(1 << 16, 0);
        mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        ASSERT_NE(mr, nullptr);
    }
    bool next_event(ibv_async_event &ev, int timeout_ms = 3000) { return next_async_event(ctx, ev, timeout_ms); }
    std::vector<uint8_t> buf;
    ibv_mr *mr = nullptr;
};

TEST_F(Events, PortDownAndUpReachEveryContext) {
    ibv_context *other = open_device();
    ASSERT_NE(other, nullptr);
    ibv_qp *a = create_rc(pd, cq), *b = create_rc(pd, cq);
    ASSERT_EQ(connect_qp(a, b->qp_num, 7, 1, IBV_ACCESS_REMOTE_WRITE, 1, 8), 0);
    ASSERT_EQ(connect_qp(b, a->qp_num, 7, 1, IBV_ACCESS_REMOTE_WRITE, 1, 8), 0);
    std::string ctl = std::getenv("SIMHCA_CTL") ? std::getenv("SIMHCA_CTL") : "../../src/simhca/simhca-ctl";
    ASSERT_EQ(std::system((ctl + " fault port-down").c_str()), 0);
    ibv_async_event ev;
    ASSERT_TRUE(next_event(ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ERR);
    EXPECT_EQ(ev.element.port_num, 1);
    ibv_ack_async_event(&ev);
    ASSERT_EQ(ibv_get_async_event(other, &ev), 0); // the other context hears it too
    EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ERR);
    ibv_ack_async_event(&ev);
    ibv_port_attr pa;
    ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
    EXPECT_EQ(pa.state, IBV_PORT_DOWN);
    // Nothing leaves a down port: the reliable send times out (retry_cnt 1, ~1 ms timeout).
    ASSERT_EQ(post_recv_simple(b, mr, buf.data(), 64, 1), 0);
    ASSERT_EQ(post_send_simple(a, mr, buf.data() + 100, 8, 2), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    ASSERT_EQ(std::system((ctl + " fault port-up").c_str()), 0);
    ASSERT_TRUE(next_event(ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ACTIVE);
    ibv_ack_async_event(&ev);
    ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
    EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
    ibv_close_device(other);
}

TEST_F(Events, LastWqeReachedOnSrqQpError) {
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 8;
    sa.attr.max_sge = 1;
    ibv_srq *srq = ibv_create_srq(pd, &sa);
    ibv_qp *q = create_rc(pd, cq, srq);
    ASSERT_TRUE(srq && q);
    ibv_qp_attr e{};
    e.qp_state = IBV_QPS_INIT;
    e.port_num = 1;
    ASSERT_EQ(ibv_modify_qp(q, &e, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
    e.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(q, &e, IBV_QP_STATE), 0);
    ibv_async_event ev;
    ASSERT_TRUE(next_event(ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
    EXPECT_EQ(ev.element.qp, q);
    ibv_ack_async_event(&ev);
    EXPECT_EQ(ibv_destroy_qp(q), 0); // the event was acked: no wait
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

TEST_F(Events, CqOverrunRaisesCqErr) {
    ibv_cq *small = ibv_create_cq(ctx, 1, nullptr, nullptr, 0);
    ASSERT_NE(small, nullptr);
    ibv_qp *a = create_rc(pd, small), *b = create_rc(pd, cq);
    ASSERT_EQ(connect_qp(a, b->qp_num), 0);
    ASSERT_EQ(connect_qp(b, a->qp_num), 0);
    int n = small->cqe + 2;
    for (int i = 0; i < n; ++i) ASSERT_EQ(post_recv_simple(b, mr, buf.data() + 64 * i, 64, i), 0);
    for (int i = 0; i < n; ++i) ASSERT_EQ(post_send_simple(a, mr, buf.data() + 8192, 8, 100 + i), 0);
    ibv_async_event ev;
    ASSERT_TRUE(next_event(ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
    EXPECT_EQ(ev.element.cq, small);
    ibv_ack_async_event(&ev);
    ibv_wc wc[8];
    ASSERT_EQ(poll_n(cq, wc, n), n); // the receiver's CQ got everything
    EXPECT_EQ(ibv_destroy_qp(a), 0);
    EXPECT_EQ(ibv_destroy_qp(b), 0);
    EXPECT_EQ(ibv_destroy_cq(small), 0);
}

TEST_F(Events, UdWithAndWithoutGrh) {
    auto make_ud = [&] {
        ibv_qp_init_attr ia{};
        ia.send_cq = ia.recv_cq = cq;
        ia.qp_type = IBV_QPT_UD;
        ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
        ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
        ibv_qp *q = ibv_create_qp(pd, &ia);
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qkey = 0x1234;
        EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
        a.qp_state = IBV_QPS_RTR;
        EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE), 0);
        a.qp_state = IBV_QPS_RTS;
        EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
        return q;
    };
    ibv_qp *s = make_ud(), *r = make_ud();
    union ibv_gid gid;
    ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
    for (int global = 0; global < 2; ++global) {
        ibv_ah_attr aa{};
        aa.dlid = 1;
        aa.port_num = 1;
        aa.is_global = global;
        aa.grh.dgid = gid;
        aa.grh.hop_limit = 1;
        ibv_ah *ah = ibv_create_ah(pd, &aa);
        ASSERT_NE(ah, nullptr);
        std::memset(buf.data(), 0xee, 200);
        ASSERT_EQ(post_recv_simple(r, mr, buf.data(), 200, 1), 0);
        std::memcpy(buf.data() + 1000, "datagram", 9);
        ibv_sge sge{uint64_t(buf.data() + 1000), 9, mr->lkey};
        ibv_send_wr wr{}, *bad;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND_WITH_IMM;
        wr.imm_data = htonl(77);
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.ud.ah = ah;
        wr.wr.ud.remote_qpn = r->qp_num;
        wr.wr.ud.remote_qkey = 0x1234;
        ASSERT_EQ(ibv_post_send(s, &wr, &bad), 0);
        ibv_wc wc[2];
        ASSERT_EQ(poll_n(cq, wc, 2), 2);
        const ibv_wc &rw = wc[0].qp_num == r->qp_num ? wc[0] : wc[1];
        EXPECT_EQ(rw.status, IBV_WC_SUCCESS);
        EXPECT_EQ(rw.byte_len, 40u + 9u);
        EXPECT_EQ(rw.src_qp, s->qp_num);
        EXPECT_TRUE(rw.wc_flags & IBV_WC_WITH_IMM);
        EXPECT_EQ(ntohl(rw.imm_data), 77u);
        EXPECT_EQ(bool(rw.wc_flags & IBV_WC_GRH), bool(global));
        EXPECT_STREQ(reinterpret_cast<char *>(buf.data() + 40), "datagram");
        if (global) EXPECT_EQ(std::memcmp(buf.data() + 24, gid.raw, 16), 0); // GRH dgid
        else EXPECT_EQ(buf[0], 0xee);                                        // GRH area untouched
        EXPECT_EQ(ibv_destroy_ah(ah), 0);
    }
    // A wrong Q_Key is silently dropped.
    ibv_ah_attr aa{};
    aa.dlid = 1;
    aa.port_num = 1;
    ibv_ah *ah = ibv_create_ah(pd, &aa);
    ASSERT_EQ(post_recv_simple(r, mr, buf.data(), 200, 9), 0);
    ibv_sge sge{uint64_t(buf.data() + 1000), 9, mr->lkey};
    ibv_send_wr wr{}, *bad;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = r->qp_num;
    wr.wr.ud.remote_qkey = 0x9999;
    ASSERT_EQ(ibv_post_send(s, &wr, &bad), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.qp_num, s->qp_num); // only the send completes
    EXPECT_EQ(poll_n(cq, &wc, 1, 50), 0);
    ibv_destroy_ah(ah);
}

TEST_F(Events, WriteWithImmAndResizeAndWrApi) {
    ibv_qp_init_attr_ex ia{};
    ia.qp_type = IBV_QPT_RC;
    ia.send_cq = ia.recv_cq = cq;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.pd = pd;
    ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND;
    ibv_qp *a = ibv_create_qp_ex(ctx, &ia);
    ibv_qp *b = create_rc(pd, cq);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(connect_qp(a, b->qp_num), 0);
    ASSERT_EQ(connect_qp(b, a->qp_num), 0);
    ASSERT_EQ(post_recv_simple(b, mr, buf.data(), 16, 5), 0);
    std::memcpy(buf.data() + 500, "imm write", 10);
    ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
    ASSERT_NE(x, nullptr);
    ibv_wr_start(x);
    x->wr_id = 6;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write_imm(x, mr->rkey, uint64_t(buf.data() + 3000), htonl(0xabc));
    ibv_wr_set_sge(x, mr->lkey, uint64_t(buf.data() + 500), 10);
    ASSERT_EQ(ibv_wr_complete(x), 0);
    ibv_wc wc[2];
    ASSERT_EQ(poll_n(cq, wc, 2), 2);
    const ibv_wc &rw = wc[0].wr_id == 5 ? wc[0] : wc[1];
    EXPECT_EQ(rw.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(rw.byte_len, 10u);
    EXPECT_EQ(ntohl(rw.imm_data), 0xabcu);
    EXPECT_STREQ(reinterpret_cast<char *>(buf.data() + 3000), "imm write");
    // Completions survive a resize.
    for (int i = 0; i < 3; ++i) ASSERT_EQ(post_recv_simple(b, mr, buf.data() + 64 * i, 64, 10 + i), 0);
    ibv_qp_attr e{};
    e.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(b, &e, IBV_QP_STATE), 0); // three flush CQEs pending
    ASSERT_EQ(ibv_resize_cq(cq, 1000), 0);
    EXPECT_GE(cq->cqe, 1000);
    ibv_wc f[3];
    ASSERT_EQ(poll_n(cq, f, 3), 3);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(f[i].wr_id, uint64_t(10 + i));
    EXPECT_EQ(ibv_resize_cq(cq, 16), 0); // shrinking works when it fits
}

// The uverbs file is shared across fork(): a child may keep using its parent's
// context (its library joins the parent's client over its own connection),
// and the parent's conversation with the daemon is not disturbed.
TEST_F(Events, ForkedChildUsesParentContext) {
    pid_t p = fork();
    if (p == 0) {
        ibv_pd *cpd = ibv_alloc_pd(ctx);
        ibv_alloc_dm_attr da{4096, 0, 0};
        ibv_dm *dm = ibv_alloc_dm(ctx, &da);
        int ok = cpd && dm && ibv_free_dm(dm) == 0 && ibv_dealloc_pd(cpd) == 0;
        _exit(ok ? 0 : 1);
    }
    for (int i = 0; i < 50; ++i) { // meanwhile the parent keeps talking
        ibv_pd *x = ibv_alloc_pd(ctx);
        ASSERT_NE(x, nullptr);
        ASSERT_EQ(ibv_dealloc_pd(x), 0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    EXPECT_EQ(ctl_count("pds"), 1); // only the fixture's PD remains
}

} // namespace
