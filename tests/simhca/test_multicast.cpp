// SPDX-License-Identifier: BSD-3-Clause
// UD multicast: ibv_attach_mcast / ibv_detach_mcast follow the kernel's
// rules, and a datagram sent to (MLID, MGID) with QPN 0xFFFFFF reaches every
// attached QP (with its GRH) on every node, subject to each one's Q_Key.
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <vector>

#include "simhca_fixture.hpp"
#include "two_node_fixture.hpp"

using namespace simhca::test;

namespace {

constexpr uint16_t kMlid = 0xc001;
constexpr uint32_t kQkey = 0x11111111;

ibv_gid mgid(uint8_t last = 1) {
    ibv_gid g{};
    g.raw[0] = 0xff;
    g.raw[1] = 0x12; // transient, link-local scope
    g.raw[2] = 0x40;
    g.raw[3] = 0x1b;
    g.raw[15] = last;
    return g;
}

ibv_qp *make_ud(ibv_pd *pd, ibv_cq *cq, uint32_t qkey = kQkey) {
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_UD;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    ibv_qp *q = ibv_create_qp(pd, &ia);
    if (!q) return nullptr;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = qkey;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) return nullptr;
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE)) return nullptr;
    a.qp_state = IBV_QPS_RTS;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) return nullptr;
    return q;
}

ibv_ah *mcast_ah(ibv_pd *pd, uint16_t mlid = kMlid, ibv_gid g = mgid()) {
    ibv_ah_attr aa{};
    aa.dlid = mlid;
    aa.port_num = 1;
    aa.is_global = 1;
    aa.grh.dgid = g;
    aa.grh.hop_limit = 1;
    return ibv_create_ah(pd, &aa);
}

int send_ud(ibv_qp *qp, ibv_ah *ah, ibv_mr *mr, const void *buf, uint32_t len, uint64_t wr_id,
            uint32_t qpn = 0xffffff) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf), len, mr->lkey};
    ibv_send_wr wr{}, *bad;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = qpn;
    wr.wr.ud.remote_qkey = kQkey;
    return ibv_post_send(qp, &wr, &bad);
}

class Multicast : public DaemonTest {
protected:
    void SetUp() override {
        DaemonTest::SetUp();
        buf.assign(1 << 16, 0);
        mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
        ASSERT_NE(mr, nullptr);
        scq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
        ASSERT_NE(scq, nullptr);
    }
    uint8_t *at(size_t off) { return buf.data() + off; }
    // Sends `text` from s and checks the sender's completion.
    void send_text(ibv_qp *s, ibv_ah *ah, const char *text, uint32_t qpn = 0xffffff) {
        std::strcpy(reinterpret_cast<char *>(at(60000)), text);
        ASSERT_EQ(send_ud(s, ah, mr, at(60000), uint32_t(std::strlen(text) + 1), 5, qpn), 0);
        ibv_wc wc;
        ASSERT_EQ(poll_n(scq, &wc, 1), 1);
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    }
    // Checks that receive `slot` (posted at at(slot * 1024)) got `text` from s.
    void expect_got(ibv_cq *rcq, int slot, const char *text, ibv_qp *s) {
        ibv_wc wc;
        ASSERT_EQ(poll_n(rcq, &wc, 1), 1);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.wr_id, uint64_t(slot));
        EXPECT_EQ(wc.src_qp, s->qp_num);
        EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH); // multicast always carries a GRH
        EXPECT_EQ(wc.byte_len, 40 + std::strlen(text) + 1);
        ibv_gid g = mgid();
        EXPECT_EQ(std::memcmp(at(size_t(slot) * 1024 + 24), g.raw, 16), 0) << "GRH destination GID";
        EXPECT_STREQ(reinterpret_cast<char *>(at(size_t(slot) * 1024 + 40)), text);
    }
    std::vector<uint8_t> buf;
    ibv_mr *mr = nullptr;
    ibv_cq *scq = nullptr;
};

TEST_F(Multicast, AttachFollowsTheKernelsRules) {
    ibv_device_attr d{};
    ASSERT_EQ(ibv_query_device(ctx, &d), 0);
    EXPECT_GT(d.max_mcast_grp, 0);
    EXPECT_GT(d.max_mcast_qp_attach, 0);
    ibv_qp *ud = make_ud(pd, cq);
    ibv_qp *rc = create_rc(pd, cq);
    ASSERT_TRUE(ud && rc);
    ibv_gid g = mgid(), unicast{};
    unicast.raw[0] = 0xfe;
    unicast.raw[1] = 0x80;
    EXPECT_EQ(ibv_attach_mcast(ud, &unicast, kMlid), EINVAL);
    EXPECT_EQ(ibv_attach_mcast(ud, &g, 0x0010), EINVAL); // a unicast LID
    EXPECT_EQ(ibv_attach_mcast(ud, &g, 0xffff), EINVAL); // the permissive LID
    EXPECT_EQ(ibv_attach_mcast(rc, &g, kMlid), EINVAL);  // UD only
    EXPECT_EQ(ibv_attach_mcast(ud, &g, kMlid), 0);
    EXPECT_EQ(ibv_attach_mcast(ud, &g, kMlid), 0); // twice: no-op
    EXPECT_EQ(ibv_detach_mcast(ud, &g, kMlid), 0);
    EXPECT_EQ(ibv_detach_mcast(ud, &g, kMlid), EINVAL); // not attached any more
    ibv_gid other = mgid(2);
    EXPECT_EQ(ibv_detach_mcast(ud, &other, kMlid), EINVAL);
    EXPECT_EQ(ibv_destroy_qp(ud), 0);
    EXPECT_EQ(ibv_destroy_qp(rc), 0);
}

TEST_F(Multicast, DatagramReachesEveryMemberAndOnlyMembers) {
    ibv_cq *cqa = ibv_create_cq(ctx, 16, nullptr, nullptr, 0), *cqb = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    ibv_cq *cqc = ibv_create_cq(ctx, 16, nullptr, nullptr, 0), *cqd = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    ASSERT_TRUE(cqa && cqb && cqc && cqd);
    ibv_qp *s = make_ud(pd, scq), *a = make_ud(pd, cqa), *b = make_ud(pd, cqb);
    ibv_qp *c = make_ud(pd, cqc), *d = make_ud(pd, cqd, 0x2222); // c: no member; d: member, other Q_Key
    ASSERT_TRUE(s && a && b && c && d);
    ibv_gid g = mgid();
    ASSERT_EQ(ibv_attach_mcast(a, &g, kMlid), 0);
    ASSERT_EQ(ibv_attach_mcast(b, &g, kMlid), 0);
    ASSERT_EQ(ibv_attach_mcast(d, &g, kMlid), 0);
    ibv_ah *ah = mcast_ah(pd);
    ASSERT_NE(ah, nullptr);
    for (int i = 0; i < 4; ++i) {
        ibv_qp *q[4] = {a, b, c, d};
        for (int k = 0; k < 2; ++k) ASSERT_EQ(post_recv_simple(q[i], mr, at(size_t(i * 2 + k) * 1024), 1024, i * 2 + k), 0);
    }
    send_text(s, ah, "to the group");
    expect_got(cqa, 0, "to the group", s);
    expect_got(cqb, 2, "to the group", s);
    ibv_wc wc;
    EXPECT_EQ(poll_n(cqc, &wc, 1, 50), 0) << "not a member";
    EXPECT_EQ(poll_n(cqd, &wc, 1, 50), 0) << "wrong Q_Key";

    // A unicast QPN with a multicast LID reaches nobody.
    send_text(s, ah, "misaddressed", a->qp_num);
    EXPECT_EQ(poll_n(cqa, &wc, 1, 50), 0);

    // After b leaves, only a hears the group.
    ASSERT_EQ(ibv_detach_mcast(b, &g, kMlid), 0);
    send_text(s, ah, "second");
    expect_got(cqa, 1, "second", s);
    EXPECT_EQ(poll_n(cqb, &wc, 1, 50), 0);

    // Destroying an attached QP detaches it (as uverbs does); the group still works.
    EXPECT_EQ(ibv_destroy_qp(a), 0);
    send_text(s, ah, "nobody left");
    EXPECT_EQ(ibv_destroy_ah(ah), 0);
    for (ibv_qp *q : {s, b, c, d}) EXPECT_EQ(ibv_destroy_qp(q), 0);
}

TEST_F(TwoNode, MulticastDatagramReachesMembersOnBothNodes) {
    ibv_qp *s = make_ud(pd[0], cq[0]);
    ibv_qp *ma = make_ud(pd[0], cq[0]);
    use(1);
    ibv_qp *mb = make_ud(pd[1], cq[1]);
    ASSERT_TRUE(s && ma && mb);
    ibv_gid g = mgid();
    ASSERT_EQ(ibv_attach_mcast(ma, &g, kMlid), 0);
    ASSERT_EQ(ibv_attach_mcast(mb, &g, kMlid), 0);
    ASSERT_EQ(post_recv_simple(ma, mr[0], buf[0].data(), 1024, 1), 0);
    ASSERT_EQ(post_recv_simple(mb, mr[1], buf[1].data(), 1024, 2), 0);
    ibv_ah *ah = mcast_ah(pd[0]);
    ASSERT_NE(ah, nullptr);
    std::strcpy(reinterpret_cast<char *>(buf[0].data() + 8192), "across the fabric");
    ASSERT_EQ(send_ud(s, ah, mr[0], buf[0].data() + 8192, 18, 9), 0);
    ibv_wc wc[2];
    ASSERT_EQ(poll_n(cq[1], wc, 1), 1); // node b's member
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc[0].wr_id, 2u);
    EXPECT_EQ(wc[0].src_qp, s->qp_num);
    EXPECT_EQ(wc[0].slid, 1);
    EXPECT_STREQ(reinterpret_cast<char *>(buf[1].data() + 40), "across the fabric");
    ASSERT_EQ(poll_n(cq[0], wc, 2), 2); // node a: the send completion and its own member's receive
    int recv = wc[0].opcode == IBV_WC_RECV ? 0 : 1;
    EXPECT_EQ(wc[recv].opcode, IBV_WC_RECV);
    EXPECT_EQ(wc[recv].wr_id, 1u);
    EXPECT_EQ(wc[1 - recv].wr_id, 9u);
    EXPECT_STREQ(reinterpret_cast<char *>(buf[0].data() + 40), "across the fabric");
}

} // namespace
