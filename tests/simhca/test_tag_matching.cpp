// SPDX-License-Identifier: BSD-3-Clause
// Hardware tag matching (TM SRQs, rdma-core's tag_matching.md): tag list
// operations and their completions, eager and rendezvous matches, unexpected
// and no-tag messages, the unexpected-count synchronisation, the errnos of
// bad input, and malformed headers (which must never hurt the daemon).
#include <cerrno>
#include <chrono>
#include <cstring>
#include <endian.h>
#include <thread>
#include <vector>

#include <infiniband/tm_types.h>

#include "simhca_fixture.hpp"
#include "two_node_fixture.hpp"

using namespace simhca::test;

namespace {

// One completion of an extended CQ, with its tag matching info.
struct TmWc {
    uint64_t wr_id = 0;
    ibv_wc_status status = IBV_WC_GENERAL_ERR;
    ibv_wc_opcode opcode = IBV_WC_SEND;
    unsigned flags = 0;
    uint32_t byte_len = 0;
    ibv_wc_tm_info tm{};
};

bool poll_tm(ibv_cq_ex *cq, TmWc &out, int timeout_ms = 5000) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    ibv_poll_cq_attr attr{};
    while (ibv_start_poll(cq, &attr) == ENOENT) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    out.wr_id = cq->wr_id;
    out.status = cq->status;
    out.opcode = ibv_wc_read_opcode(cq);
    out.flags = ibv_wc_read_wc_flags(cq);
    out.byte_len = ibv_wc_read_byte_len(cq);
    ibv_wc_read_tm_info(cq, &out.tm);
    ibv_end_poll(cq);
    return true;
}

ibv_cq_ex *create_tm_cq(ibv_context *ctx) {
    ibv_cq_init_attr_ex a{};
    a.cqe = 256;
    a.wc_flags = uint64_t(IBV_WC_STANDARD_FLAGS) | IBV_WC_EX_WITH_TM_INFO;
    return ibv_create_cq_ex(ctx, &a);
}

ibv_srq *create_tm_srq(ibv_context *ctx, ibv_pd *pd, ibv_cq_ex *cq, uint32_t max_num_tags) {
    ibv_srq_init_attr_ex a{};
    a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
    a.srq_type = IBV_SRQT_TM;
    a.pd = pd;
    a.cq = cq ? ibv_cq_ex_to_cq(cq) : nullptr;
    a.attr.max_wr = 64;
    a.attr.max_sge = 1;
    a.tm_cap.max_num_tags = max_num_tags;
    a.tm_cap.max_ops = 16;
    return ibv_create_srq_ex(ctx, &a);
}

// Writes a TMH (and, for a rendezvous, an RVH) at p; returns the header size.
size_t write_tmh(uint8_t *p, uint8_t op, uint64_t tag, uint32_t app_ctx = 0) {
    ibv_tmh h{};
    h.opcode = op;
    h.app_ctx = htobe32(app_ctx);
    h.tag = htobe64(tag);
    std::memcpy(p, &h, sizeof(h));
    return sizeof(h);
}
size_t write_rndv(uint8_t *p, uint64_t tag, const void *va, uint32_t rkey, uint32_t len) {
    size_t n = write_tmh(p, IBV_TMH_RNDV, tag, 0x5a5a);
    ibv_rvh r{};
    r.va = htobe64(reinterpret_cast<uint64_t>(va));
    r.rkey = htobe32(rkey);
    r.len = htobe32(len);
    std::memcpy(p + n, &r, sizeof(r));
    return n + sizeof(r);
}

int tag_op(ibv_srq *srq, ibv_ops_wr_opcode op, uint64_t wr_id, uint32_t &handle, uint64_t tag = 0,
           uint64_t mask = 0, ibv_sge *sge = nullptr, int flags = IBV_OPS_SIGNALED, uint32_t unexpected_cnt = 0) {
    ibv_ops_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.flags = flags;
    wr.tm.unexpected_cnt = unexpected_cnt;
    wr.tm.handle = handle;
    wr.tm.add.recv_wr_id = wr_id;
    wr.tm.add.sg_list = sge;
    wr.tm.add.num_sge = sge ? 1 : 0;
    wr.tm.add.tag = tag;
    wr.tm.add.mask = mask;
    int e = ibv_post_srq_ops(srq, &wr, &bad);
    if (e) {
        EXPECT_EQ(bad, &wr);
    }
    handle = wr.tm.handle;
    return e;
}

class TagMatching : public DaemonTest {
protected:
    void SetUp() override {
        DaemonTest::SetUp();
        buf.assign(1 << 20, 0);
        mr = ibv_reg_mr(pd, buf.data(), buf.size(),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
        ASSERT_NE(mr, nullptr);
        tcq = create_tm_cq(ctx);
        ASSERT_NE(tcq, nullptr);
        srq = create_tm_srq(ctx, pd, tcq, 8);
        ASSERT_NE(srq, nullptr) << errno;
        r = create_rc(pd, ibv_cq_ex_to_cq(tcq), srq);
        s = create_rc(pd, cq, nullptr, 64);
        ASSERT_TRUE(r && s);
        ASSERT_EQ(connect_qp(s, r->qp_num), 0);
        ASSERT_EQ(connect_qp(r, s->qp_num), 0);
    }
    uint8_t *tagged(int i) { return buf.data() + size_t(i) * 4096; }          // tagged buffers
    uint8_t *plain(int i) { return buf.data() + 65536 + size_t(i) * 4096; }   // ordinary SRQ receives
    uint8_t *src() { return buf.data() + 131072; }                           // what the sender sends
    uint8_t *payload() { return buf.data() + 262144; }                       // rendezvous data
    uint8_t *fin() { return buf.data() + 524288; }                           // the sender's receive
    // Adds a signaled tag over tagged(i) and checks its TM_ADD completion.
    uint32_t add(int i, uint64_t tag, uint64_t mask = ~0ull, uint32_t len = 4096) {
        ibv_sge sge{reinterpret_cast<uint64_t>(tagged(i)), len, mr->lkey};
        uint32_t h = 0;
        EXPECT_EQ(tag_op(srq, IBV_WR_TAG_ADD, uint64_t(i), h, tag, mask, &sge), 0);
        TmWc wc;
        EXPECT_TRUE(poll_tm(tcq, wc));
        EXPECT_EQ(wc.opcode, IBV_WC_TM_ADD);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.wr_id, uint64_t(i));
        return h;
    }
    void send(uint32_t len) {
        ASSERT_EQ(post_send_simple(s, mr, src(), len, 777), 0);
        ibv_wc wc;
        ASSERT_EQ(poll_n(cq, &wc, 1), 1);
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    }
    void send_eager(uint64_t tag, const char *text, uint8_t op = IBV_TMH_EAGER) {
        size_t n = write_tmh(src(), op, tag, 0xabcd);
        std::strcpy(reinterpret_cast<char *>(src() + n), text);
        send(uint32_t(n + std::strlen(text) + 1));
    }
    std::vector<uint8_t> buf;
    ibv_mr *mr = nullptr;
    ibv_cq_ex *tcq = nullptr;
    ibv_srq *srq = nullptr;
    ibv_qp *r = nullptr, *s = nullptr;
};

TEST_F(TagMatching, DeviceAdvertisesRcTagMatching) {
    ibv_device_attr_ex a{};
    ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &a), 0);
    EXPECT_TRUE(a.tm_caps.flags & IBV_TM_CAP_RC);
    EXPECT_GT(a.tm_caps.max_num_tags, 0u);
    EXPECT_GT(a.tm_caps.max_ops, 0u);
    EXPECT_EQ(a.tm_caps.max_sge, 1u);
    EXPECT_GE(a.tm_caps.max_rndv_hdr_size, uint32_t(sizeof(ibv_tmh) + sizeof(ibv_rvh)));
}

TEST_F(TagMatching, EagerMatchPlacesPayloadWithoutHeader) {
    add(0, 1);
    uint32_t h2 = add(1, 2);
    uint32_t h3 = add(2, 3);
    send_eager(2, "tagged hello");
    TmWc wc;
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
    EXPECT_EQ(wc.wr_id, 1u) << "the recv_wr_id of the tag that matched";
    EXPECT_EQ(wc.flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID), unsigned(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
    EXPECT_EQ(wc.tm.tag, 2u);
    EXPECT_EQ(wc.tm.priv, 0xabcdu);
    EXPECT_EQ(wc.byte_len, uint32_t(std::strlen("tagged hello") + 1));
    EXPECT_STREQ(reinterpret_cast<char *>(tagged(1)), "tagged hello");
    EXPECT_EQ(tagged(0)[0], 0) << "other tagged buffers untouched";

    // A consumed tag cannot be deleted (TM_ERR); a listed one can.
    ASSERT_EQ(tag_op(srq, IBV_WR_TAG_DEL, 50, h2), 0);
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.opcode, IBV_WC_TM_DEL);
    EXPECT_EQ(wc.status, IBV_WC_TM_ERR);
    ASSERT_EQ(tag_op(srq, IBV_WR_TAG_DEL, 51, h3), 0);
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.opcode, IBV_WC_TM_DEL);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 51u);
    // The deleted tag no longer matches: the message is unexpected.
    ASSERT_EQ(post_srq_recv_simple(srq, mr, plain(0), 4096, 900), 0);
    send_eager(3, "late");
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
    EXPECT_EQ(wc.wr_id, 900u);
    EXPECT_EQ(wc.flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID), 0u);
}

TEST_F(TagMatching, MaskedTagsMatchOldestFirst) {
    add(0, 0x100, 0xff00); // any tag 0x1XX
    add(1, 0x1ff);
    send_eager(0x1ff, "one");
    TmWc wc;
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.wr_id, 0u);
    EXPECT_EQ(wc.tm.tag, 0x1ffu);
    send_eager(0x1ff, "two");
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_STREQ(reinterpret_cast<char *>(tagged(0)), "one");
    EXPECT_STREQ(reinterpret_cast<char *>(tagged(1)), "two");
}

TEST_F(TagMatching, UnexpectedMessageDisablesNewTagsUntilSync) {
    for (int i = 0; i < 3; ++i) ASSERT_EQ(post_srq_recv_simple(srq, mr, plain(i), 4096, 900 + i), 0);
    send_eager(7, "nobody waits");
    TmWc wc;
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
    EXPECT_EQ(wc.wr_id, 900u);
    EXPECT_EQ(wc.flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID), 0u);
    EXPECT_EQ(wc.tm.tag, 0u);
    EXPECT_EQ(std::memcmp(plain(0), src(), 16 + 13), 0) << "software gets the TMH too";

    // Added before software reported the unexpected message: it must not match yet.
    ibv_sge sge{reinterpret_cast<uint64_t>(tagged(0)), 4096, mr->lkey};
    uint32_t h = 0;
    ASSERT_EQ(tag_op(srq, IBV_WR_TAG_ADD, 1, h, 7, ~0ull, &sge), 0);
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.opcode, IBV_WC_TM_ADD);
    EXPECT_TRUE(wc.flags & IBV_WC_TM_SYNC_REQ);
    send_eager(7, "still unexpected");
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.wr_id, 901u);
    EXPECT_EQ(wc.flags & IBV_WC_TM_MATCH, 0u);

    uint32_t none = 0;
    ASSERT_EQ(tag_op(srq, IBV_WR_TAG_SYNC, 27, none, 0, 0, nullptr, IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC, 2), 0);
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.opcode, IBV_WC_TM_SYNC);
    EXPECT_EQ(wc.wr_id, 27u);
    EXPECT_FALSE(wc.flags & IBV_WC_TM_SYNC_REQ);
    send_eager(7, "matched now");
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_TRUE(wc.flags & IBV_WC_TM_MATCH);
    EXPECT_STREQ(reinterpret_cast<char *>(tagged(0)), "matched now");
}

TEST_F(TagMatching, NoTagMessageGoesWholeToAnOrdinaryReceive) {
    add(0, 5);
    ASSERT_EQ(post_srq_recv_simple(srq, mr, plain(0), 4096, 900), 0);
    send_eager(5, "no tag", IBV_TMH_NO_TAG);
    TmWc wc;
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.opcode, IBV_WC_TM_NO_TAG);
    EXPECT_EQ(wc.wr_id, 900u);
    EXPECT_EQ(wc.byte_len, 16u + 7u);
    EXPECT_EQ(std::memcmp(plain(0), src(), 16 + 7), 0);
    EXPECT_EQ(tagged(0)[0], 0);
    // No unexpected message was counted: a new tag needs no sync.
    ibv_sge sge{reinterpret_cast<uint64_t>(tagged(1)), 64, mr->lkey};
    uint32_t h = 0;
    ASSERT_EQ(tag_op(srq, IBV_WR_TAG_ADD, 1, h, 9, ~0ull, &sge), 0);
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_FALSE(wc.flags & IBV_WC_TM_SYNC_REQ);
}

TEST_F(TagMatching, RendezvousReadsTheSenderAndSendsFin) {
    constexpr uint32_t kLen = 3000;
    for (uint32_t i = 0; i < kLen; ++i) payload()[i] = uint8_t(i * 7 + 1);
    add(0, 42);
    ASSERT_EQ(post_recv_simple(s, mr, fin(), 4096, 555), 0);
    send(uint32_t(write_rndv(src(), 42, payload(), mr->rkey, kLen)));
    TmWc wc;
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
    EXPECT_EQ(wc.flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID), unsigned(IBV_WC_TM_MATCH));
    EXPECT_EQ(wc.tm.tag, 42u);
    EXPECT_EQ(wc.tm.priv, 0x5a5au);
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
    EXPECT_EQ(wc.flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID), unsigned(IBV_WC_TM_DATA_VALID));
    EXPECT_EQ(wc.wr_id, 0u);
    EXPECT_EQ(wc.byte_len, kLen);
    EXPECT_EQ(std::memcmp(tagged(0), payload(), kLen), 0);
    EXPECT_EQ(tagged(0)[kLen], 0);
    // The sender learns that its buffer is free: a FIN with its TMH and RVH.
    ibv_wc w;
    ASSERT_EQ(poll_n(cq, &w, 1), 1);
    EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    EXPECT_EQ(w.opcode, IBV_WC_RECV);
    EXPECT_EQ(w.wr_id, 555u);
    EXPECT_EQ(w.byte_len, 32u);
    EXPECT_EQ(fin()[0], IBV_TMH_FIN);
    EXPECT_EQ(std::memcmp(fin() + 1, src() + 1, 31), 0);
    // Nothing else: no send completion leaks out of the receiver's own send queue.
    EXPECT_EQ(poll_n(cq, &w, 1, 100), 0);
}

TEST_F(TagMatching, RendezvousIntoTooSmallBufferLeavesItToSoftware) {
    add(0, 42, ~0ull, 16);
    send(uint32_t(write_rndv(src(), 42, payload(), mr->rkey, 3000)));
    TmWc wc;
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.status, IBV_WC_TM_RNDV_INCOMPLETE);
    EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
    EXPECT_TRUE(wc.flags & IBV_WC_TM_MATCH);
    EXPECT_EQ(std::memcmp(tagged(0), src(), 16), 0) << "the headers, as far as they fit";
    EXPECT_FALSE(poll_tm(tcq, wc, 100)) << "no data transfer follows";
}

TEST_F(TagMatching, RendezvousWithBadRkeyFailsTheTaggedBuffer) {
    add(0, 42);
    send(uint32_t(write_rndv(src(), 42, payload(), mr->rkey + 1000, 100)));
    TmWc wc;
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_TRUE(wc.flags & IBV_WC_TM_MATCH);
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
    EXPECT_EQ(wc.wr_id, 0u);
    EXPECT_FALSE(wc.flags & IBV_WC_TM_DATA_VALID);
}

// The rendezvous runs on the receiving QP's send queue, which an RTR QP does
// not process yet; destroying the QP then gives the tagged buffer's slot back.
TEST_F(TagMatching, DestroyingTheQpMidRendezvousFreesTheTag) {
    ibv_qp *r2 = create_rc(pd, ibv_cq_ex_to_cq(tcq), srq);
    ibv_qp *s2 = create_rc(pd, cq, nullptr, 16);
    ASSERT_TRUE(r2 && s2);
    ASSERT_EQ(connect_qp(s2, r2->qp_num), 0);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
    ASSERT_EQ(ibv_modify_qp(r2, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = s2->qp_num;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.ah_attr.dlid = 1;
    a.ah_attr.port_num = 1;
    ASSERT_EQ(ibv_modify_qp(r2, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              0);
    add(0, 42);
    size_t n = write_rndv(src(), 42, payload(), mr->rkey, 100);
    ASSERT_EQ(post_send_simple(s2, mr, src(), uint32_t(n), 777), 0);
    TmWc wc;
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_TRUE(wc.flags & IBV_WC_TM_MATCH);
    EXPECT_FALSE(poll_tm(tcq, wc, 100)) << "no READ from an RTR QP";
    // The buffer in the rendezvous still holds its slot: 7 more fill the list of 8.
    ibv_sge sge{reinterpret_cast<uint64_t>(tagged(1)), 64, mr->lkey};
    uint32_t h = 0;
    for (int i = 1; i < 8; ++i) ASSERT_EQ(tag_op(srq, IBV_WR_TAG_ADD, 100, h, 100, ~0ull, &sge, 0), 0);
    EXPECT_EQ(tag_op(srq, IBV_WR_TAG_ADD, 100, h, 100, ~0ull, &sge, 0), ENOMEM);
    // Destroying the QP ends the rendezvous (its flush completion goes with
    // the QP's other unpolled completions, as every destroy cleans the CQ).
    ASSERT_EQ(ibv_destroy_qp(r2), 0);
    EXPECT_EQ(tag_op(srq, IBV_WR_TAG_ADD, 100, h, 100, ~0ull, &sge, 0), 0);
    EXPECT_EQ(h, 0u) << "the slot of the abandoned rendezvous";
}

// The daemon marks its rendezvous WQEs with a send flag bit; a client that
// sets that bit itself must still get its ordinary completion.
TEST_F(TagMatching, ClientWqeWithTheInternalFlagCompletesNormally) {
    add(0, 1);
    ASSERT_EQ(post_recv_simple(s, mr, fin(), 4096, 555), 0);
    ibv_sge sge{reinterpret_cast<uint64_t>(src()), 8, mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = 1; // looks like (handle 0, cookie 1)
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | (1u << 31);
    ASSERT_EQ(ibv_post_send(r, &wr, &bad), 0);
    TmWc wc;
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.opcode, IBV_WC_SEND);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 1u);
    ibv_wc w;
    ASSERT_EQ(poll_n(cq, &w, 1), 1);
    EXPECT_EQ(w.wr_id, 555u);
    // ... and the listed tag is untouched.
    send_eager(1, "ok");
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
    EXPECT_STREQ(reinterpret_cast<char *>(tagged(0)), "ok");
}

TEST_F(TagMatching, BadInputFailsWithTheErrnosOfMlx5) {
    ibv_device_attr_ex a{};
    ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &a), 0);
    // The list holds max_num_tags (8 here); one more is ENOMEM.
    for (int i = 0; i < 8; ++i) {
        ibv_sge sge{reinterpret_cast<uint64_t>(tagged(i)), 64, mr->lkey};
        uint32_t h = 0;
        ASSERT_EQ(tag_op(srq, IBV_WR_TAG_ADD, uint64_t(i), h, uint64_t(i), ~0ull, &sge, 0), 0);
    }
    ibv_sge sge{reinterpret_cast<uint64_t>(tagged(9)), 64, mr->lkey};
    uint32_t h = 0;
    EXPECT_EQ(tag_op(srq, IBV_WR_TAG_ADD, 9, h, 9, ~0ull, &sge, 0), ENOMEM);
    TmWc wc;
    EXPECT_FALSE(poll_tm(tcq, wc, 50)) << "unsignaled operations complete silently";
    // Deleting frees a slot again.
    h = 3;
    ASSERT_EQ(tag_op(srq, IBV_WR_TAG_DEL, 3, h, 0, 0, nullptr, 0), 0);
    EXPECT_EQ(tag_op(srq, IBV_WR_TAG_ADD, 9, h, 9, ~0ull, &sge, 0), 0);
    EXPECT_EQ(h, 3u);
    h = 1000;
    EXPECT_EQ(tag_op(srq, IBV_WR_TAG_DEL, 1, h), EINVAL) << "no such handle";
    {
        ibv_ops_wr bogus{}, *b = nullptr;
        uint32_t op = 99; // what a C caller can store in the enum
        std::memcpy(&bogus.opcode, &op, sizeof(op));
        EXPECT_EQ(ibv_post_srq_ops(srq, &bogus, &b), EINVAL);
        EXPECT_EQ(b, &bogus);
    }
    ibv_sge two[2] = {sge, sge};
    ibv_ops_wr wr{}, *bad = nullptr;
    wr.opcode = IBV_WR_TAG_ADD;
    wr.tm.add.sg_list = two;
    wr.tm.add.num_sge = 2;
    EXPECT_EQ(ibv_post_srq_ops(srq, &wr, &bad), EINVAL) << "one SGE per tagged buffer";
    EXPECT_EQ(bad, &wr);

    // Tag operations on an ordinary SRQ.
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 4;
    sa.attr.max_sge = 1;
    ibv_srq *basic = ibv_create_srq(pd, &sa);
    ASSERT_NE(basic, nullptr);
    EXPECT_EQ(tag_op(basic, IBV_WR_TAG_ADD, 1, h, 1, ~0ull, &sge), EINVAL);
    EXPECT_EQ(ibv_destroy_srq(basic), 0);

    // TM SRQs beyond the caps or without their CQ.
    errno = 0;
    EXPECT_EQ(create_tm_srq(ctx, pd, tcq, a.tm_caps.max_num_tags + 1), nullptr);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(create_tm_srq(ctx, pd, nullptr, 4), nullptr);
    EXPECT_EQ(errno, EINVAL);
    // Only RC QPs may take their receives from a TM SRQ.
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = cq;
    qa.srq = srq;
    qa.qp_type = IBV_QPT_UD;
    qa.cap.max_send_wr = 4;
    qa.cap.max_send_sge = 1;
    errno = 0;
    EXPECT_EQ(ibv_create_qp(pd, &qa), nullptr);
    EXPECT_EQ(errno, EINVAL);
}

// Truncated or nonsensical headers are ordinary data to the SRQ: each message
// lands in an ordinary receive, and the daemon keeps matching afterwards.
TEST_F(TagMatching, MalformedHeadersNeverReachTheMatcher) {
    add(0, 1);
    for (int i = 0; i < 6; ++i) ASSERT_EQ(post_srq_recv_simple(srq, mr, plain(i), 4096, 900 + i), 0);
    struct Case {
        uint32_t len;
        uint8_t op;
        ibv_wc_opcode want;
    } cases[] = {
        {0, 0, IBV_WC_RECV},                  // empty
        {5, IBV_TMH_EAGER, IBV_WC_RECV},      // shorter than a TMH
        {15, IBV_TMH_EAGER, IBV_WC_RECV},
        {16, IBV_TMH_RNDV, IBV_WC_TM_RECV},   // rendezvous without its RVH: unexpected
        {24, 0x77, IBV_WC_RECV},              // unknown opcode
        {32, IBV_TMH_FIN, IBV_WC_RECV},       // a FIN is not for the matcher
    };
    int i = 0;
    for (const Case &c : cases) {
        std::memset(src(), 0, 64);
        write_tmh(src(), c.op, 1); // tag 1 is listed: none of these may take it
        send(c.len);
        TmWc wc;
        ASSERT_TRUE(poll_tm(tcq, wc)) << "case " << i;
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "case " << i;
        EXPECT_EQ(wc.opcode, c.want) << "case " << i;
        EXPECT_EQ(wc.wr_id, uint64_t(900 + i)) << "case " << i;
        EXPECT_EQ(wc.byte_len, c.len) << "case " << i;
        ++i;
    }
    uint32_t none = 0; // the rendezvous without RVH was unexpected: report it
    ASSERT_EQ(tag_op(srq, IBV_WR_TAG_SYNC, 27, none, 0, 0, nullptr, IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC, 1), 0);
    TmWc wc;
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_FALSE(wc.flags & IBV_WC_TM_SYNC_REQ);
    send_eager(1, "still matching");
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
    EXPECT_EQ(wc.wr_id, 0u);
    EXPECT_STREQ(reinterpret_cast<char *>(tagged(0)), "still matching");
}

// Random bytes of random length, no tags listed: every message completes in
// an ordinary receive, whatever its "header" says.
TEST_F(TagMatching, RandomHeadersAllComplete) {
    constexpr int kMessages = 50;
    for (int i = 0; i < kMessages; ++i) ASSERT_EQ(post_srq_recv_simple(srq, mr, plain(i % 16), 4096, 900 + i), 0);
    uint32_t seed = 12345;
    auto next = [&] { return seed = seed * 1103515245u + 12345u, seed >> 16; };
    for (int i = 0; i < kMessages; ++i) {
        uint32_t len = next() % 65;
        for (uint32_t k = 0; k < len; ++k) src()[k] = uint8_t(next());
        if (i % 4 == 0 && len) src()[0] = uint8_t(next() % 4); // a valid opcode now and then
        send(len);
        TmWc wc;
        ASSERT_TRUE(poll_tm(tcq, wc)) << "message " << i;
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "message " << i;
        EXPECT_EQ(wc.wr_id, uint64_t(900 + i));
        EXPECT_EQ(wc.byte_len, len);
        EXPECT_TRUE(wc.opcode == IBV_WC_RECV || wc.opcode == IBV_WC_TM_RECV || wc.opcode == IBV_WC_TM_NO_TAG);
        EXPECT_FALSE(wc.flags & IBV_WC_TM_MATCH);
    }
    ibv_device_attr a{};
    EXPECT_EQ(ibv_query_device(ctx, &a), 0);
    EXPECT_GT(ctl_count("qps"), 0) << "the daemon still answers";
}

} // namespace

// The rendezvous READ and FIN go through the requester path, so they cross
// daemons like any other request.
TEST_F(TwoNode, TagMatchingRendezvousAcrossDaemons) {
    constexpr uint32_t kLen = 200000;
    use(1);
    ibv_cq_ex *tcq = create_tm_cq(ctx[1]);
    ASSERT_NE(tcq, nullptr);
    ibv_srq *srq = create_tm_srq(ctx[1], pd[1], tcq, 4);
    ASSERT_NE(srq, nullptr);
    ibv_qp *b = create_rc(pd[1], ibv_cq_ex_to_cq(tcq), srq);
    use(0);
    ibv_qp *a = create_rc(pd[0], cq[0], nullptr, 16);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(connect_remote(a, b->qp_num, 2, 7, 14), 0);
    use(1);
    ASSERT_EQ(connect_remote(b, a->qp_num, 1, 7, 14), 0);

    ibv_sge sge{reinterpret_cast<uint64_t>(buf[1].data()), kLen, mr[1]->lkey};
    uint32_t h = 0;
    ASSERT_EQ(tag_op(srq, IBV_WR_TAG_ADD, 9, h, 0x99, ~0ull, &sge, 0), 0);
    uint8_t *data = buf[0].data() + 400000;
    for (uint32_t i = 0; i < kLen; ++i) data[i] = uint8_t(i * 31 + 3);
    use(0);
    ASSERT_EQ(post_recv_simple(a, mr[0], buf[0].data() + 800000, 64, 1), 0);
    size_t n = write_rndv(buf[0].data(), 0x99, data, mr[0]->rkey, kLen);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data(), uint32_t(n), 2), 0);

    TmWc wc;
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_TRUE(wc.flags & IBV_WC_TM_MATCH);
    EXPECT_EQ(wc.tm.tag, 0x99u);
    ASSERT_TRUE(poll_tm(tcq, wc));
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_TRUE(wc.flags & IBV_WC_TM_DATA_VALID);
    EXPECT_EQ(wc.byte_len, kLen);
    EXPECT_EQ(std::memcmp(buf[1].data(), data, kLen), 0);
    ibv_wc w[2];
    ASSERT_EQ(poll_n(cq[0], w, 2), 2); // the send and the FIN
    for (const ibv_wc &x : w) EXPECT_EQ(x.status, IBV_WC_SUCCESS);
    EXPECT_EQ(buf[0][800000], IBV_TMH_FIN);
}
