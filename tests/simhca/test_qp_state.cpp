// SPDX-License-Identifier: BSD-3-Clause
// QP state machine: the kernel's transition mask table, legal and illegal.
#include <fcntl.h>
#include <unistd.h>

#include "simhca_fixture.hpp"

using namespace simhca::test;

namespace {

class QpState : public DaemonTest {};

constexpr int kInitMask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kRtrBase = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
constexpr int kRtsSender = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC;

ibv_qp_attr attrs(ibv_qp_state s) {
    ibv_qp_attr a{};
    a.qp_state = s;
    a.port_num = 1;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = 0x123;
    a.ah_attr.dlid = 1;
    a.ah_attr.port_num = 1;
    a.max_dest_rd_atomic = 1;
    a.max_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.qkey = 0x11111111;
    return a;
}

ibv_qp_state state_of(ibv_qp *qp) {
    ibv_qp_attr a{};
    ibv_qp_init_attr i{};
    EXPECT_EQ(ibv_query_qp(qp, &a, IBV_QP_STATE, &i), 0);
    return a.qp_state;
}

TEST_F(QpState, RcLegalPathAndMissingOrExtraBits) {
    ibv_qp *qp = create_rc(pd, cq);
    ASSERT_NE(qp, nullptr);
    auto a = attrs(IBV_QPS_INIT);
    // RESET->INIT without ACCESS_FLAGS: required bit missing.
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT), EINVAL);
    // RESET->INIT with QKEY (a UD attribute): extra bit.
    EXPECT_EQ(ibv_modify_qp(qp, &a, kInitMask | IBV_QP_QKEY), EINVAL);
    // RESET->RTR skips a state.
    auto r = attrs(IBV_QPS_RTR);
    EXPECT_EQ(ibv_modify_qp(qp, &r, kRtrBase | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), EINVAL);
    EXPECT_EQ(state_of(qp), IBV_QPS_RESET);
    ASSERT_EQ(ibv_modify_qp(qp, &a, kInitMask), 0);
    EXPECT_EQ(state_of(qp), IBV_QPS_INIT);
    // INIT->INIT with optional bits only.
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS), 0);
    // CUR_STATE is only allowed from RTR/RTS/SQD/SQE.
    a.cur_qp_state = IBV_QPS_INIT;
    EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE), EINVAL);
    // INIT->RTR for RC needs MAX_DEST_RD_ATOMIC and MIN_RNR_TIMER.
    EXPECT_EQ(ibv_modify_qp(qp, &r, kRtrBase), EINVAL);
    ASSERT_EQ(ibv_modify_qp(qp, &r, kRtrBase | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), 0);
    auto s = attrs(IBV_QPS_RTS);
    EXPECT_EQ(ibv_modify_qp(qp, &s, kRtsSender & ~IBV_QP_RNR_RETRY), EINVAL);
    ASSERT_EQ(ibv_modify_qp(qp, &s, kRtsSender | IBV_QP_MIN_RNR_TIMER), 0);
    EXPECT_EQ(state_of(qp), IBV_QPS_RTS);
    // RTS->RTS: optional MIN_RNR_TIMER ok, TIMEOUT is not optional there.
    EXPECT_EQ(ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER), 0);
    EXPECT_EQ(ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_TIMEOUT), EINVAL);
    // Any state -> ERR and -> RESET with no other attribute.
    auto e = attrs(IBV_QPS_ERR);
    EXPECT_EQ(ibv_modify_qp(qp, &e, IBV_QP_STATE), 0);
    EXPECT_EQ(state_of(qp), IBV_QPS_ERR);
    EXPECT_EQ(ibv_modify_qp(qp, &e, IBV_QP_STATE | IBV_QP_TIMEOUT), EINVAL);
    auto z = attrs(IBV_QPS_RESET);
    EXPECT_EQ(ibv_modify_qp(qp, &z, IBV_QP_STATE), 0);
    EXPECT_EQ(state_of(qp), IBV_QPS_RESET);
    // RESET->ERR is not in the kernel's table.
    EXPECT_EQ(ibv_modify_qp(qp, &e, IBV_QP_STATE), EINVAL);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

// Automatic path migration, software side: an alternate path is loaded and armed (REARM; this HCA arms at
// once) in RTR->RTS or RTS->RTS, and MIGRATED in RTS->RTS makes it the primary path.
TEST_F(QpState, AlternatePathLoadArmAndMigrate) {
    ibv_qp *qp = create_rc(pd, cq);
    ASSERT_NE(qp, nullptr);
    auto a = attrs(IBV_QPS_INIT);
    ASSERT_EQ(ibv_modify_qp(qp, &a, kInitMask), 0);
    auto r = attrs(IBV_QPS_RTR);
    ASSERT_EQ(ibv_modify_qp(qp, &r, kRtrBase | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), 0);
    auto s = attrs(IBV_QPS_RTS);
    // Arming with no alternate path is refused; MIGRATED leaving RTR is the starting state and allowed.
    s.path_mig_state = IBV_MIG_REARM;
    EXPECT_EQ(ibv_modify_qp(qp, &s, kRtsSender | IBV_QP_PATH_MIG_STATE), EINVAL);
    s.path_mig_state = IBV_MIG_MIGRATED;
    ASSERT_EQ(ibv_modify_qp(qp, &s, kRtsSender | IBV_QP_PATH_MIG_STATE), 0);

    ibv_qp_attr q{};
    ibv_qp_init_attr qi{};
    ASSERT_EQ(ibv_query_qp(qp, &q, IBV_QP_PATH_MIG_STATE | IBV_QP_AV, &qi), 0);
    EXPECT_EQ(q.path_mig_state, IBV_MIG_MIGRATED);
    EXPECT_EQ(q.ah_attr.dlid, 1);
    // MIGRATED in RTS with nothing armed: refused (the spec allows it only from ARMED).
    ibv_qp_attr m{};
    m.qp_state = IBV_QPS_RTS;
    m.path_mig_state = IBV_MIG_MIGRATED;
    EXPECT_EQ(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PATH_MIG_STATE), EINVAL);

    // An alternate path out of range: its port, its timeout.
    ibv_qp_attr alt{};
    alt.qp_state = IBV_QPS_RTS;
    alt.alt_ah_attr.dlid = 0x33;
    alt.alt_ah_attr.port_num = 1;
    alt.alt_port_num = 2;
    alt.alt_timeout = 16;
    alt.path_mig_state = IBV_MIG_REARM;
    EXPECT_EQ(ibv_modify_qp(qp, &alt, IBV_QP_STATE | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE), EINVAL);
    alt.alt_port_num = 1;
    alt.alt_timeout = 32;
    EXPECT_EQ(ibv_modify_qp(qp, &alt, IBV_QP_STATE | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE), EINVAL);
    alt.alt_timeout = 16;
    ASSERT_EQ(ibv_modify_qp(qp, &alt, IBV_QP_STATE | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE), 0);
    q = {};
    ASSERT_EQ(ibv_query_qp(qp, &q, IBV_QP_PATH_MIG_STATE | IBV_QP_AV | IBV_QP_ALT_PATH, &qi), 0);
    EXPECT_EQ(q.path_mig_state, IBV_MIG_ARMED);
    EXPECT_EQ(q.ah_attr.dlid, 1);  // still the primary path
    EXPECT_EQ(q.alt_ah_attr.dlid, 0x33);
    EXPECT_EQ(q.alt_port_num, 1);
    EXPECT_EQ(q.alt_timeout, 16);

    // The swap.
    ASSERT_EQ(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PATH_MIG_STATE), 0);
    q = {};
    ASSERT_EQ(ibv_query_qp(qp, &q, IBV_QP_PATH_MIG_STATE | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_PORT, &qi), 0);
    EXPECT_EQ(q.path_mig_state, IBV_MIG_MIGRATED);
    EXPECT_EQ(q.ah_attr.dlid, 0x33);
    EXPECT_EQ(q.timeout, 16);
    EXPECT_EQ(q.port_num, 1);
    EXPECT_EQ(state_of(qp), IBV_QPS_RTS);
    // Migrated: nothing is armed any more, neither a second MIGRATED nor REARM without a new path pass.
    EXPECT_EQ(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PATH_MIG_STATE), EINVAL);
    ibv_qp_attr rearm{};
    rearm.qp_state = IBV_QPS_RTS;
    rearm.path_mig_state = IBV_MIG_REARM;
    EXPECT_EQ(ibv_modify_qp(qp, &rearm, IBV_QP_STATE | IBV_QP_PATH_MIG_STATE), EINVAL);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

TEST_F(QpState, UdMasks) {
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_UD;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    ibv_qp *qp = ibv_create_qp(pd, &ia);
    ASSERT_NE(qp, nullptr);
    auto a = attrs(IBV_QPS_INIT);
    EXPECT_EQ(ibv_modify_qp(qp, &a, kInitMask), EINVAL); // UD has QKEY, not ACCESS_FLAGS
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
    auto r = attrs(IBV_QPS_RTR);
    EXPECT_EQ(ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_AV), EINVAL);
    ASSERT_EQ(ibv_modify_qp(qp, &r, IBV_QP_STATE), 0);
    auto s = attrs(IBV_QPS_RTS);
    EXPECT_EQ(ibv_modify_qp(qp, &s, IBV_QP_STATE), EINVAL); // SQ_PSN required
    EXPECT_EQ(ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

TEST_F(QpState, XrcIniAndTgtMasks) {
    char path[] = "/tmp/simhca-xrcd-XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ibv_xrcd_init_attr xa{};
    xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    xa.fd = fd;
    xa.oflags = O_CREAT;
    ibv_xrcd *xrcd = ibv_open_xrcd(ctx, &xa);
    ASSERT_NE(xrcd, nullptr);

    ibv_qp_init_attr_ex ini{};
    ini.qp_type = IBV_QPT_XRC_SEND;
    ini.send_cq = cq;
    ini.cap.max_send_wr = 4;
    ini.cap.max_send_sge = 1;
    ini.comp_mask = IBV_QP_INIT_ATTR_PD;
    ini.pd = pd;
    ibv_qp *iq = ibv_create_qp_ex(ctx, &ini);
    ASSERT_NE(iq, nullptr);
    EXPECT_EQ(ini.cap.max_recv_wr, 0u);
    auto a = attrs(IBV_QPS_INIT);
    ASSERT_EQ(ibv_modify_qp(iq, &a, kInitMask), 0);
    auto r = attrs(IBV_QPS_RTR);
    EXPECT_EQ(ibv_modify_qp(iq, &r, kRtrBase & ~IBV_QP_DEST_QPN), EINVAL);
    EXPECT_EQ(ibv_modify_qp(iq, &r, kRtrBase | IBV_QP_QKEY), EINVAL);
    // RC-only responder attributes on an INI: the kernel's uverbs layer
    // (modify_qp_mask) strips them before the table check, so real systems
    // accept and ignore them (perftest -c XRC relies on it).
    ASSERT_EQ(ibv_modify_qp(iq, &r, kRtrBase | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), 0);
    ibv_qp_attr got{};
    ibv_qp_init_attr gi{};
    ASSERT_EQ(ibv_query_qp(iq, &got, IBV_QP_MIN_RNR_TIMER, &gi), 0);
    EXPECT_EQ(got.min_rnr_timer, 0); // ignored, not stored
    EXPECT_EQ(got.qp_state, IBV_QPS_RTR);
    auto s = attrs(IBV_QPS_RTS);
    EXPECT_EQ(ibv_modify_qp(iq, &s, kRtsSender & ~IBV_QP_SQ_PSN), EINVAL);
    ASSERT_EQ(ibv_modify_qp(iq, &s, kRtsSender), 0);

    ibv_qp_init_attr_ex tgt{};
    tgt.qp_type = IBV_QPT_XRC_RECV;
    tgt.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    tgt.xrcd = xrcd;
    ibv_qp *tq = ibv_create_qp_ex(ctx, &tgt);
    ASSERT_NE(tq, nullptr);
    ASSERT_EQ(ibv_modify_qp(tq, &a, kInitMask), 0);
    EXPECT_EQ(ibv_modify_qp(tq, &r, kRtrBase), EINVAL); // TGT needs the responder attributes
    ASSERT_EQ(ibv_modify_qp(tq, &r, kRtrBase | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), 0);
    EXPECT_EQ(ibv_modify_qp(tq, &s, IBV_QP_STATE | IBV_QP_SQ_PSN), EINVAL); // TIMEOUT required
    EXPECT_EQ(ibv_modify_qp(tq, &s, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN | IBV_QP_QKEY), EINVAL);
    // Sender-only attributes on a TGT are stripped (uverbs) and accepted.
    EXPECT_EQ(ibv_modify_qp(tq, &s, kRtsSender | IBV_QP_MIN_RNR_TIMER), 0);

    EXPECT_EQ(ibv_destroy_qp(tq), 0);
    EXPECT_EQ(ibv_destroy_qp(iq), 0);
    EXPECT_EQ(ibv_close_xrcd(xrcd), 0);
    close(fd);
    unlink(path);
}

} // namespace
