// SPDX-License-Identifier: BSD-3-Clause
// Faults as real HCAs report them (docs/faults-model.md): a responder-detected invalid request or access
// violation puts the responder's QP (an XRC TGT QP: shared by every process holding a handle) in ERR, the
// requester gets the matching NAK completion, and the affiliated QP event reaches every handle. Plus every
// event simhca-ctl can inject: on a QP, CQ, SRQ, a LID change, CLIENT_REREGISTER.
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <string>
#include <unistd.h>
#include <vector>

#include "simhca_fixture.hpp"

using namespace simhca::test;

namespace {

class Faults : public DaemonTest {
protected:
    void SetUp() override {
        DaemonTest::SetUp();
        buf.assign(1 << 14, 0);
        mr = ibv_reg_mr(pd, buf.data(), buf.size(),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
        ASSERT_NE(mr, nullptr);
    }
    void TearDown() override {
        if (other) ibv_close_device(other);
        DaemonTest::TearDown();
    }
    // The next event of context `c` is `type` on QP `qp`.
    static void expect_qp_event(ibv_context *c, ibv_event_type type, ibv_qp *qp) {
        ibv_async_event ev;
        ASSERT_TRUE(next_async_event(c, ev)) << "no event " << ibv_event_type_str(type);
        EXPECT_EQ(ev.event_type, type) << ibv_event_type_str(ev.event_type);
        EXPECT_EQ(ev.element.qp, qp);
        ibv_ack_async_event(&ev);
    }
    static ibv_qp_state state_of(ibv_qp *qp) {
        ibv_qp_attr a{};
        ibv_qp_init_attr ia{};
        return ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) == 0 ? a.qp_state : IBV_QPS_UNKNOWN;
    }
    // The first "cqn" of this test's CQs in `simhca-ctl list --json`.
    long first_cqn() {
        std::string j = ctl_list_json();
        auto at = j.find("\"cq_list\":[{\"cqn\":");
        return at == std::string::npos ? -1 : std::strtol(j.c_str() + at + 18, nullptr, 10);
    }

    // An XRC receive side in `ctx`: a domain, an XRC SRQ with receives posted, a TGT QP; plus an INI QP
    // connected to it.
    struct XrcPair {
        ibv_xrcd *xrcd = nullptr;
        ibv_srq *srq = nullptr;
        uint32_t srqn = 0;
        ibv_qp *tgt = nullptr, *ini = nullptr;
    };
    void make_xrc(XrcPair &x) {
        std::string path = tmpdir + "/xrcd";
        int fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0600);
        ASSERT_GE(fd, 0);
        ibv_xrcd_init_attr xa{};
        xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        xa.fd = fd;
        xa.oflags = O_CREAT;
        x.xrcd = ibv_open_xrcd(ctx, &xa);
        ::close(fd);
        ASSERT_NE(x.xrcd, nullptr);
        ibv_srq_init_attr_ex sa{};
        sa.attr.max_wr = 8;
        sa.attr.max_sge = 1;
        sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
        sa.srq_type = IBV_SRQT_XRC;
        sa.xrcd = x.xrcd;
        sa.cq = cq;
        sa.pd = pd;
        x.srq = ibv_create_srq_ex(ctx, &sa);
        ASSERT_NE(x.srq, nullptr);
        ASSERT_EQ(ibv_get_srq_num(x.srq, &x.srqn), 0);
        ASSERT_EQ(post_srq_recv_simple(x.srq, mr, buf.data(), 256, 1), 0);
        ibv_qp_init_attr_ex ta{};
        ta.qp_type = IBV_QPT_XRC_RECV;
        ta.comp_mask = IBV_QP_INIT_ATTR_XRCD;
        ta.xrcd = x.xrcd;
        x.tgt = ibv_create_qp_ex(ctx, &ta);
        ASSERT_NE(x.tgt, nullptr);
        ibv_qp_init_attr_ex ia{};
        ia.qp_type = IBV_QPT_XRC_SEND;
        ia.send_cq = cq;
        ia.cap.max_send_wr = 8;
        ia.cap.max_send_sge = 1;
        ia.comp_mask = IBV_QP_INIT_ATTR_PD;
        ia.pd = pd;
        x.ini = ibv_create_qp_ex(ctx, &ia);
        ASSERT_NE(x.ini, nullptr);
        ASSERT_EQ(connect_qp(x.ini, x.tgt->qp_num), 0);
        ASSERT_EQ(connect_qp(x.tgt, x.ini->qp_num), 0);
    }
    // A second context (another daemon client, as another process is) holding its own handle of the TGT QP.
    ibv_qp *open_tgt_elsewhere(const XrcPair &x, ibv_xrcd *&oxrcd) {
        other = open_device();
        if (!other) return nullptr;
        std::string path = tmpdir + "/xrcd";
        int fd = ::open(path.c_str(), O_RDONLY);
        ibv_xrcd_init_attr xa{};
        xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        xa.fd = fd;
        oxrcd = ibv_open_xrcd(other, &xa);
        ::close(fd);
        if (!oxrcd) return nullptr;
        ibv_qp_open_attr oa{};
        oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
        oa.qp_num = x.tgt->qp_num;
        oa.xrcd = oxrcd;
        oa.qp_type = IBV_QPT_XRC_RECV;
        return ibv_open_qp(other, &oa);
    }

    std::vector<uint8_t> buf;
    ibv_mr *mr = nullptr;
    ibv_context *other = nullptr;
};

TEST_F(Faults, RcBadRkeyPutsTheResponderInErrorWithAccessEvent) {
    ibv_qp *a = create_rc(pd, cq), *b = create_rc(pd, cq);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(connect_qp(a, b->qp_num), 0);
    ASSERT_EQ(connect_qp(b, a->qp_num), 0);
    ASSERT_EQ(post_send_simple(a, mr, buf.data(), 8, 1, IBV_WR_RDMA_WRITE, reinterpret_cast<uint64_t>(buf.data() + 64),
                               mr->rkey ^ 0x1000),
              0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    expect_qp_event(ctx, IBV_EVENT_QP_ACCESS_ERR, b);
    EXPECT_EQ(state_of(b), IBV_QPS_ERR);
    EXPECT_EQ(state_of(a), IBV_QPS_ERR);
}

TEST_F(Faults, RcOutOfBoundsWriteIsAnAccessError) {
    ibv_qp *a = create_rc(pd, cq), *b = create_rc(pd, cq);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(connect_qp(a, b->qp_num), 0);
    ASSERT_EQ(connect_qp(b, a->qp_num), 0);
    // Past the end of the registered buffer.
    ASSERT_EQ(post_send_simple(a, mr, buf.data(), 64, 1, IBV_WR_RDMA_WRITE,
                               reinterpret_cast<uint64_t>(buf.data() + buf.size() - 8), mr->rkey),
              0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    expect_qp_event(ctx, IBV_EVENT_QP_ACCESS_ERR, b);
    EXPECT_EQ(state_of(b), IBV_QPS_ERR);
}

TEST_F(Faults, XrcTgtAccessErrorReachesEveryHandle) {
    XrcPair x;
    ASSERT_NO_FATAL_FAILURE(make_xrc(x));
    ibv_xrcd *oxrcd = nullptr;
    ibv_qp *opened = open_tgt_elsewhere(x, oxrcd);
    ASSERT_NE(opened, nullptr);
    ASSERT_EQ(post_send_simple(x.ini, mr, buf.data(), 8, 7, IBV_WR_RDMA_WRITE,
                               reinterpret_cast<uint64_t>(buf.data() + 64), mr->rkey ^ 0x1000, x.srqn),
              0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.wr_id, 7u);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    // The creator and the other holder each hear QP_ACCESS_ERR on their own handle, then LAST_WQE_REACHED.
    expect_qp_event(ctx, IBV_EVENT_QP_ACCESS_ERR, x.tgt);
    expect_qp_event(other, IBV_EVENT_QP_ACCESS_ERR, opened);
    expect_qp_event(ctx, IBV_EVENT_QP_LAST_WQE_REACHED, x.tgt);
    expect_qp_event(other, IBV_EVENT_QP_LAST_WQE_REACHED, opened);
    EXPECT_EQ(state_of(x.tgt), IBV_QPS_ERR);
    EXPECT_EQ(state_of(opened), IBV_QPS_ERR);
    EXPECT_EQ(ibv_destroy_qp(opened), 0);
    EXPECT_EQ(ibv_close_xrcd(oxrcd), 0);
}

TEST_F(Faults, XrcTgtInvalidRequestRaisesReqErr) {
    XrcPair x;
    ASSERT_NO_FATAL_FAILURE(make_xrc(x));
    ibv_xrcd *oxrcd = nullptr;
    ibv_qp *opened = open_tgt_elsewhere(x, oxrcd);
    ASSERT_NE(opened, nullptr);
    // An SRQ number that names no SRQ of the TGT QP's domain: an invalid request.
    ASSERT_EQ(post_send_simple(x.ini, mr, buf.data(), 8, 8, IBV_WR_SEND, 0, 0, x.srqn + 0x777), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.wr_id, 8u);
    EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
    expect_qp_event(ctx, IBV_EVENT_QP_REQ_ERR, x.tgt);
    expect_qp_event(other, IBV_EVENT_QP_REQ_ERR, opened);
    EXPECT_EQ(state_of(x.tgt), IBV_QPS_ERR);
    // A new INI toward the broken TGT QP gets no answer at all (a QP in ERR drops what arrives).
    EXPECT_EQ(ibv_destroy_qp(opened), 0);
    EXPECT_EQ(ibv_close_xrcd(oxrcd), 0);
}

TEST_F(Faults, XrcTgtBadOpcodeRaisesReqErr) {
    XrcPair x;
    ASSERT_NO_FATAL_FAILURE(make_xrc(x));
    // SEND with invalidate is no operation of an XRC TGT QP (it has no MWs of its own to invalidate).
    ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), 8, mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = 9;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND_WITH_INV;
    wr.invalidate_rkey = mr->rkey;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.qp_type.xrc.remote_srqn = x.srqn;
    ASSERT_EQ(ibv_post_send(x.ini, &wr, &bad), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.wr_id, 9u);
    EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
    expect_qp_event(ctx, IBV_EVENT_QP_REQ_ERR, x.tgt);
    EXPECT_EQ(state_of(x.tgt), IBV_QPS_ERR);
}

TEST_F(Faults, InjectedQpEventsReachEveryHandleAndErrorsMoveTheQp) {
    XrcPair x;
    ASSERT_NO_FATAL_FAILURE(make_xrc(x));
    ibv_xrcd *oxrcd = nullptr;
    ibv_qp *opened = open_tgt_elsewhere(x, oxrcd);
    ASSERT_NE(opened, nullptr);
    const std::string tgt = std::to_string(x.tgt->qp_num);
    ASSERT_EQ(ctl("fault event COMM_EST --qp " + tgt), 0);
    expect_qp_event(ctx, IBV_EVENT_COMM_EST, x.tgt);
    expect_qp_event(other, IBV_EVENT_COMM_EST, opened);
    EXPECT_EQ(state_of(x.tgt), IBV_QPS_RTS);  // informational: no state change
    ASSERT_EQ(ctl("fault event QP_FATAL --qp " + tgt), 0);
    expect_qp_event(ctx, IBV_EVENT_QP_FATAL, x.tgt);
    expect_qp_event(other, IBV_EVENT_QP_FATAL, opened);
    expect_qp_event(ctx, IBV_EVENT_QP_LAST_WQE_REACHED, x.tgt);  // the error state reached
    expect_qp_event(other, IBV_EVENT_QP_LAST_WQE_REACHED, opened);
    EXPECT_EQ(state_of(x.tgt), IBV_QPS_ERR);
    // On an RC QP with queues: QP_REQ_ERR flushes what was posted.
    ibv_qp *a = create_rc(pd, cq);
    ASSERT_NE(a, nullptr);
    ASSERT_EQ(connect_qp(a, a->qp_num), 0);
    ASSERT_EQ(post_recv_simple(a, mr, buf.data() + 512, 64, 21), 0);
    ASSERT_EQ(ctl("fault event IBV_EVENT_QP_REQ_ERR --qp " + std::to_string(a->qp_num)), 0);
    ibv_async_event ev;
    ASSERT_TRUE(next_async_event(ctx, ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_REQ_ERR);
    EXPECT_EQ(ev.element.qp, a);
    ibv_ack_async_event(&ev);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.wr_id, 21u);
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_NE(ctl("fault event QP_FATAL --qp 0xfffff0 2>/dev/null"), 0);  // no such QP
    EXPECT_NE(ctl("fault event NO_SUCH_EVENT --qp " + tgt + " 2>/dev/null"), 0);
    EXPECT_EQ(ibv_destroy_qp(opened), 0);
    EXPECT_EQ(ibv_close_xrcd(oxrcd), 0);
}

TEST_F(Faults, InjectedCqAndSrqEvents) {
    long cqn = first_cqn();
    ASSERT_GT(cqn, 0);
    ASSERT_EQ(ctl("fault event CQ_ERR --cq " + std::to_string(cqn)), 0);
    ibv_async_event ev;
    ASSERT_TRUE(next_async_event(ctx, ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
    EXPECT_EQ(ev.element.cq, cq);
    ibv_ack_async_event(&ev);
    XrcPair x;
    ASSERT_NO_FATAL_FAILURE(make_xrc(x));
    for (const char *name : {"SRQ_ERR", "SRQ_LIMIT_REACHED"}) {
        ASSERT_EQ(ctl(std::string("fault event ") + name + " --srq " + std::to_string(x.srqn)), 0);
        ASSERT_TRUE(next_async_event(ctx, ev));
        EXPECT_STREQ(ibv_event_type_str(ev.event_type),
                     ibv_event_type_str(name[4] == 'E' ? IBV_EVENT_SRQ_ERR : IBV_EVENT_SRQ_LIMIT_REACHED));
        EXPECT_EQ(ev.element.srq, x.srq);
        ibv_ack_async_event(&ev);
    }
}

TEST_F(Faults, LidChangeAndClientReregister) {
    ASSERT_EQ(ctl("fault lid --port 1 --lid 0x27"), 0);
    ibv_async_event ev;
    ASSERT_TRUE(next_async_event(ctx, ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_LID_CHANGE);
    EXPECT_EQ(ev.element.port_num, 1);
    ibv_ack_async_event(&ev);
    ibv_port_attr pa;
    ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
    EXPECT_EQ(pa.lid, 0x27);
    // Traffic follows the new LID: a QP addressed to the old one reaches nobody, the new one works.
    ibv_qp *a = create_rc(pd, cq), *b = create_rc(pd, cq);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(connect_qp(a, b->qp_num, 7, 1, IBV_ACCESS_REMOTE_WRITE, 7, 14, 1, 0x27), 0);
    ASSERT_EQ(connect_qp(b, a->qp_num, 7, 1, IBV_ACCESS_REMOTE_WRITE, 7, 14, 1, 0x27), 0);
    ASSERT_EQ(post_recv_simple(b, mr, buf.data(), 64, 1), 0);
    ASSERT_EQ(post_send_simple(a, mr, buf.data() + 100, 8, 2), 0);
    ibv_wc wc[2];
    ASSERT_EQ(poll_n(cq, wc, 2), 2);
    for (auto &w : wc) EXPECT_EQ(w.status, IBV_WC_SUCCESS);

    ASSERT_EQ(ctl("fault client-reregister --port 1"), 0);
    ASSERT_TRUE(next_async_event(ctx, ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_CLIENT_REREGISTER);
    EXPECT_EQ(ev.element.port_num, 1);
    ibv_ack_async_event(&ev);
    ASSERT_EQ(ctl("fault event SM_CHANGE"), 0);
    ASSERT_TRUE(next_async_event(ctx, ev));
    EXPECT_EQ(ev.event_type, IBV_EVENT_SM_CHANGE);
    ibv_ack_async_event(&ev);
    EXPECT_NE(ctl("fault lid --port 1 2>/dev/null"), 0);  // needs --lid
}

}  // namespace
