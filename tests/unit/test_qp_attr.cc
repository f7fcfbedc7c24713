// SPDX-License-Identifier: BSD-3-Clause
// The transition masks must be exactly the kernel's (xrc-semantics.md): nothing missing, nothing extra.
#include "src/core/qp_attr.h"

#include <gtest/gtest.h>

using namespace xrc;

namespace {
PathSettings path() {
    PathSettings p;
    p.port_num = 1;
    p.mtu = IBV_MTU_2048;
    p.timeout = 14;
    p.retry_count = 5;
    p.rnr_retry = 7;
    p.min_rnr_timer = 12;
    p.max_rd_atomic = 4;
    return p;
}
RemoteQp remote() { return RemoteQp{7, {}, 0x1234, 0x55}; }
}  // namespace

TEST(QpAttr, IniResetToInit) {
    const auto t = ini_to_init(path());
    EXPECT_EQ(t.mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    EXPECT_EQ(t.attr.qp_state, IBV_QPS_INIT);
    EXPECT_EQ(t.attr.port_num, 1);
}

TEST(QpAttr, IniInitToRtrHasNoResponderAttributes) {
    const auto t = ini_to_rtr(path(), remote());
    EXPECT_EQ(t.mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
    EXPECT_EQ(t.mask & IBV_QP_MAX_DEST_RD_ATOMIC, 0);  // the kernel rejects it on XRC INI (Open MPI #1839)
    EXPECT_EQ(t.mask & IBV_QP_MIN_RNR_TIMER, 0);
    EXPECT_EQ(t.attr.dest_qp_num, 0x1234u);
    EXPECT_EQ(t.attr.rq_psn, 0x55u);
    EXPECT_EQ(t.attr.ah_attr.dlid, 7);
    EXPECT_EQ(t.attr.path_mtu, IBV_MTU_2048);
    EXPECT_EQ(t.attr.ah_attr.is_global, 0);
}

TEST(QpAttr, IniRtrToRts) {
    const auto t = ini_to_rts(path(), 0x99);
    EXPECT_EQ(t.mask, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC);
    EXPECT_EQ(t.attr.timeout, 14);
    EXPECT_EQ(t.attr.retry_cnt, 5);
    EXPECT_EQ(t.attr.rnr_retry, 7);
    EXPECT_EQ(t.attr.sq_psn, 0x99u);
}

TEST(QpAttr, TgtTransitions) {
    auto t = tgt_to_init(path());
    EXPECT_EQ(t.mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    EXPECT_TRUE(t.attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE);
    EXPECT_TRUE(t.attr.qp_access_flags & IBV_ACCESS_REMOTE_READ);
    EXPECT_TRUE(t.attr.qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC);
    t = tgt_to_rtr(path(), remote());
    EXPECT_EQ(t.mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    EXPECT_EQ(t.attr.min_rnr_timer, 12);
    EXPECT_EQ(t.attr.max_dest_rd_atomic, 4);
    t = tgt_to_rts(path(), 3);
    EXPECT_EQ(t.mask, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN);
}

TEST(QpAttr, GrhWhenAsked) {
    auto p = path();
    p.use_grh = true;
    p.gid_index = 3;
    RemoteQp r = remote();
    r.gid.raw[15] = 9;
    const auto t = ini_to_rtr(p, r);
    EXPECT_EQ(t.attr.ah_attr.is_global, 1);
    EXPECT_EQ(t.attr.ah_attr.grh.sgid_index, 3);
    EXPECT_EQ(t.attr.ah_attr.grh.dgid.raw[15], 9);
}

TEST(QpAttr, MtuAndPsn) {
    EXPECT_EQ(mtu_from_bytes(256), IBV_MTU_256);
    EXPECT_EQ(mtu_from_bytes(4096), IBV_MTU_4096);
    EXPECT_EQ(mtu_to_bytes(IBV_MTU_1024), 1024);
    EXPECT_LT(initial_psn(0xffffffu), 1u << 24);
    EXPECT_NE(initial_psn(1), initial_psn(2));
}
