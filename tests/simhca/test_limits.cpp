// SPDX-License-Identifier: BSD-3-Clause
// Device limits are enforced with the errno a real device gives: EINVAL for
// capabilities beyond the device attributes, ENOMEM for a full work queue,
// EINVAL for a work request with more SGEs than the QP was created with.
#include <cstring>
#include <vector>

#include "simhca_fixture.hpp"

using namespace simhca::test;

namespace {

class Limits : public DaemonTest {};

TEST_F(Limits, CreateBeyondDeviceAttributesIsEinval) {
    ibv_device_attr da;
    ASSERT_EQ(ibv_query_device(ctx, &da), 0);
    auto try_qp = [&](auto tweak) {
        ibv_qp_init_attr a{};
        a.send_cq = a.recv_cq = cq;
        a.qp_type = IBV_QPT_RC;
        a.cap.max_send_wr = a.cap.max_recv_wr = 4;
        a.cap.max_send_sge = a.cap.max_recv_sge = 1;
        tweak(a);
        errno = 0;
        ibv_qp *qp = ibv_create_qp(pd, &a);
        int e = errno;
        if (qp) ibv_destroy_qp(qp);
        return qp ? 0 : e;
    };
    EXPECT_EQ(try_qp([&](ibv_qp_init_attr &a) { a.cap.max_send_wr = da.max_qp_wr + 1; }), EINVAL);
    EXPECT_EQ(try_qp([&](ibv_qp_init_attr &a) { a.cap.max_recv_wr = da.max_qp_wr + 1; }), EINVAL);
    EXPECT_EQ(try_qp([&](ibv_qp_init_attr &a) { a.cap.max_send_sge = da.max_sge + 1; }), EINVAL);
    EXPECT_EQ(try_qp([&](ibv_qp_init_attr &a) { a.cap.max_inline_data = 100000; }), EINVAL);
    EXPECT_EQ(try_qp([&](ibv_qp_init_attr &a) { a.cap.max_send_wr = da.max_qp_wr; }), 0);
    errno = 0;
    EXPECT_EQ(ibv_create_cq(ctx, da.max_cqe + 1, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = da.max_srq_wr + 1;
    sa.attr.max_sge = 1;
    errno = 0;
    EXPECT_EQ(ibv_create_srq(pd, &sa), nullptr);
    EXPECT_EQ(errno, EINVAL);
}

// As on InfiniBand HCAs the GID table has several entries of which only index 0 is populated: an empty entry
// reads as a zero GID through ibv_query_gid (sysfs shows zeros) and as ENODATA through ibv_query_gid_ex; past
// the table is an error.
TEST_F(Limits, GidTableHasOnePopulatedEntry) {
    ibv_port_attr pa;
    ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
    ASSERT_GT(pa.gid_tbl_len, 1);
    ibv_gid gid;
    ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
    EXPECT_NE(gid.global.interface_id, 0u);
    ASSERT_EQ(ibv_query_gid(ctx, 1, 1, &gid), 0);
    EXPECT_EQ(gid.global.subnet_prefix, 0u);
    EXPECT_EQ(gid.global.interface_id, 0u);
    EXPECT_NE(ibv_query_gid(ctx, 1, pa.gid_tbl_len, &gid), 0);
    ibv_gid_entry entry;
    EXPECT_EQ(ibv_query_gid_ex(ctx, 1, 0, &entry, 0), 0);
    EXPECT_EQ(entry.gid_type, IBV_GID_TYPE_IB);
    EXPECT_EQ(ibv_query_gid_ex(ctx, 1, 1, &entry, 0), ENODATA);
    EXPECT_EQ(ibv_query_gid_ex(ctx, 1, pa.gid_tbl_len, &entry, 0), EINVAL);
    std::vector<ibv_gid_entry> table(pa.gid_tbl_len);
    EXPECT_EQ(ibv_query_gid_table(ctx, table.data(), table.size(), 0), 1);
}

TEST_F(Limits, FullQueuesAndTooManySges) {
    std::vector<char> mem(4096);
    ibv_mr *mr = ibv_reg_mr(pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ibv_qp *a = create_rc(pd, cq, nullptr, 4), *b = create_rc(pd, cq, nullptr, 4);
    ASSERT_TRUE(a && b);
    ibv_qp_attr qa{};
    ibv_qp_init_attr qi{};
    ASSERT_EQ(ibv_query_qp(a, &qa, IBV_QP_CAP, &qi), 0);
    uint32_t depth = qi.cap.max_recv_wr;
    EXPECT_EQ(post_recv_simple(a, mr, mem.data(), 64, 0), EINVAL); // no receives in RESET
    ASSERT_EQ(connect_qp(a, b->qp_num), 0);
    ASSERT_EQ(connect_qp(b, a->qp_num), 0);
    // Receive queue: exactly `depth` fit, the next one is ENOMEM and is reported as bad_wr.
    for (uint32_t i = 0; i < depth; ++i) ASSERT_EQ(post_recv_simple(a, mr, mem.data(), 64, i), 0);
    ibv_sge sge{uint64_t(mem.data()), 64, mr->lkey};
    ibv_recv_wr rw{}, *bad = nullptr;
    rw.sg_list = &sge;
    rw.num_sge = 1;
    EXPECT_EQ(ibv_post_recv(a, &rw, &bad), ENOMEM);
    EXPECT_EQ(bad, &rw);
    // More SGEs than the QP was created with.
    std::vector<ibv_sge> many(qi.cap.max_recv_sge + 1, sge);
    rw.sg_list = many.data();
    rw.num_sge = int(many.size());
    bad = nullptr;
    EXPECT_EQ(ibv_post_recv(b, &rw, &bad), EINVAL);
    ibv_send_wr sw{}, *sbad = nullptr;
    std::vector<ibv_sge> sm(qi.cap.max_send_sge + 1, sge);
    sw.sg_list = sm.data();
    sw.num_sge = int(sm.size());
    sw.opcode = IBV_WR_SEND;
    EXPECT_EQ(ibv_post_send(a, &sw, &sbad), EINVAL);
    EXPECT_EQ(sbad, &sw);
    // Inline data larger than the device's limit.
    std::vector<char> big(100000);
    ibv_sge bs{uint64_t(big.data()), uint32_t(big.size()), 0};
    sw.sg_list = &bs;
    sw.num_sge = 1;
    sw.send_flags = IBV_SEND_INLINE;
    EXPECT_EQ(ibv_post_send(a, &sw, &sbad), EINVAL);
    EXPECT_EQ(ibv_destroy_qp(a), 0);
    EXPECT_EQ(ibv_destroy_qp(b), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

} // namespace
