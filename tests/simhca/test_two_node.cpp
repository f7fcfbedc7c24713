// SPDX-License-Identifier: BSD-3-Clause
// Two simulated nodes on the host: two daemons (private instances) joined
// by a fabric file on 127.0.0.1. Checks data crossing daemons, XRC across
// nodes, and the transport retry rules when a node's traffic is lost.
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <thread>
#include <unistd.h>

#include "simhca_fixture.hpp"
#include "two_node_fixture.hpp"

using namespace simhca::test;

TEST_F(TwoNode, RcSendWriteReadAtomicAcrossDaemons) {
    ibv_qp *a, *b;
    rc_pair(a, b);
    for (size_t i = 0; i < 100000; ++i) buf[0][i] = uint8_t(i * 13);
    ASSERT_EQ(post_recv_simple(b, mr[1], buf[1].data(), 200000, 1), 0);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data(), 100000, 2), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq[1], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 100000u);
    EXPECT_EQ(wc.src_qp, a->qp_num);
    EXPECT_EQ(wc.slid, 1);
    EXPECT_EQ(std::memcmp(buf[0].data(), buf[1].data(), 100000), 0);
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);

    std::memset(buf[0].data() + 300000, 0x77, 70000);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data() + 300000, 70000, 3, IBV_WR_RDMA_WRITE,
                               uint64_t(buf[1].data() + 500000), mr[1]->rkey),
              0);
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(buf[1][500000 + 69999], 0x77);
    EXPECT_EQ(buf[1][500000 + 70000], 0);

    std::memset(buf[1].data() + 600000, 0x42, 5000);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data() + 700000, 5000, 4, IBV_WR_RDMA_READ,
                               uint64_t(buf[1].data() + 600000), mr[1]->rkey),
              0);
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(buf[0][700000 + 4999], 0x42);

    uint64_t *counter = reinterpret_cast<uint64_t *>(buf[1].data() + 800000);
    *counter = 1000;
    for (int i = 0; i < 10; ++i) {
        ibv_sge sge{uint64_t(buf[0].data() + 800000), 8, mr[0]->lkey};
        ibv_send_wr wr{}, *bad;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.atomic.remote_addr = uint64_t(counter);
        wr.wr.atomic.rkey = mr[1]->rkey;
        wr.wr.atomic.compare_add = 5;
        ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
        ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    }
    EXPECT_EQ(*counter, 1050u);
    // Bad rkey across nodes.
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data(), 8, 5, IBV_WR_RDMA_WRITE, uint64_t(buf[1].data()),
                               mr[1]->rkey + 0x100),
              0);
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
}

// Regression: a local (streamed) send left its sender ranges behind, and the
// next remote RDMA READ from the same daemon shipped them (daemon crash).
TEST_F(TwoNode, LocalSendThenRemoteRead) {
    ibv_qp *l1 = create_rc(pd[0], cq[0]), *l2 = create_rc(pd[0], cq[0]);
    ASSERT_TRUE(l1 && l2);
    ASSERT_EQ(connect_remote(l1, l2->qp_num, 1, 7, 14), 0);
    ASSERT_EQ(connect_remote(l2, l1->qp_num, 1, 7, 14), 0);
    ASSERT_EQ(post_recv_simple(l2, mr[0], buf[0].data(), 4096, 1), 0);
    ASSERT_EQ(post_send_simple(l1, mr[0], buf[0].data() + 8192, 4096, 2), 0);
    ibv_wc wc[2];
    ASSERT_EQ(poll_n(cq[0], wc, 2), 2);
    ibv_qp *a, *b;
    rc_pair(a, b);
    std::memset(buf[1].data() + 1000, 0x3c, 64);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data() + 20000, 64, 3, IBV_WR_RDMA_READ,
                               uint64_t(buf[1].data() + 1000), mr[1]->rkey),
              0);
    ASSERT_EQ(poll_n(cq[0], wc, 1), 1);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(buf[0][20063], 0x3c);
}

TEST_F(TwoNode, ManyMessagesStayInOrder) {
    ibv_qp *a, *b;
    rc_pair(a, b);
    constexpr int kN = 200;
    for (int i = 0; i < kN; ++i) ASSERT_EQ(post_recv_simple(b, mr[1], buf[1].data() + i * 64, 64, i), 0);
    int posted = 0, done = 0;
    ibv_wc wc[16];
    while (done < kN) {
        while (posted < kN && posted - done < 12) {
            uint32_t v = uint32_t(posted);
            std::memcpy(buf[0].data() + 100000 + posted * 8, &v, 4);
            ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data() + 100000 + posted * 8, 4, posted), 0);
            ++posted;
        }
        int n = poll_n(cq[0], wc, 1);
        ASSERT_EQ(n, 1);
        ASSERT_EQ(wc[0].status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc[0].wr_id, uint64_t(done));
        ++done;
    }
    for (int i = 0; i < kN; ++i) {
        ASSERT_EQ(poll_n(cq[1], wc, 1), 1);
        EXPECT_EQ(wc[0].wr_id, uint64_t(i));
        uint32_t v;
        std::memcpy(&v, buf[1].data() + i * 64, 4);
        EXPECT_EQ(v, uint32_t(i)); // the i-th receive got the i-th send
    }
}

TEST_F(TwoNode, LostTrafficRetriesThenSucceedsOrFails) {
    ibv_qp *a, *b;
    rc_pair(a, b, 3, 14); // ACK timeout 67 ms, 3 retries
    ASSERT_EQ(post_recv_simple(b, mr[1], buf[1].data(), 64, 1), 0);
    ASSERT_EQ(ctl(0, "fault drop nb"), 0);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data(), 16, 7), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(ctl(0, "fault restore nb"), 0); // well within the retry budget
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(poll_n(cq[1], &wc, 1), 1); // delivered exactly once
    EXPECT_EQ(poll_n(cq[1], &wc, 1, 50), 0);

    ASSERT_EQ(ctl(0, "fault drop nb"), 0);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data(), 16, 8), 0);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data(), 16, 9), 0);
    ibv_wc two[2];
    ASSERT_EQ(poll_n(cq[0], two, 2), 2);
    EXPECT_EQ(two[0].wr_id, 8u);
    EXPECT_EQ(two[0].status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(two[1].status, IBV_WC_WR_FLUSH_ERR);
    ASSERT_EQ(ctl(0, "fault restore nb"), 0);
}

TEST_F(TwoNode, APortThatIsDownNeitherAnswersNorReceives) {
    ibv_qp *a, *b;
    rc_pair(a, b, 3, 14);  // ACK timeout 67 ms, 3 retries
    buf[1][0] = 42;
    ASSERT_EQ(ctl(1, "fault port-down"), 0);  // the responder's port
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf[0].data()), 8, mr[0]->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = 5;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf[1].data());
    wr.wr.rdma.rkey = mr[1]->rkey;
    buf[0][0] = 0;
    ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.wr_id, 5u);
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);  // not answered from behind a port that is down
    EXPECT_EQ(buf[0][0], 0);
    ASSERT_EQ(ctl(1, "fault port-up"), 0);
    ibv_qp *c, *d;
    rc_pair(c, d);
    ASSERT_EQ(ibv_post_send(c, &wr, &bad), 0);
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(buf[0][0], 42);
}

// The responder's link loses every answer (fault ack-drop): the request is delivered once, the requester never
// hears of it and ends with RETRY_EXC_ERR (and a flush behind it), as when a link dies between the data and the
// ACK. The retransmissions meet the replay record and deliver nothing again. The same link loses the answers its
// own node's requests get; restored within the budget, the acknowledgement of a retransmission completes the send.
TEST_F(TwoNode, AckDropDeliversOnceAndAnswersNothing) {
    ibv_qp *a, *b;
    rc_pair(a, b, 3, 14);  // ACK timeout 67 ms, 3 retries
    for (uint32_t i = 0; i < 2; ++i) ASSERT_EQ(post_recv_simple(b, mr[1], buf[1].data() + i * 64, 64, 10 + i), 0);
    ASSERT_EQ(ctl(1, "fault ack-drop"), 0);  // the responder's link
    std::memcpy(buf[0].data(), "first", 6);
    std::memcpy(buf[0].data() + 64, "second", 7);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data(), 6, 1), 0);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data() + 64, 7, 2), 0);
    ibv_wc wc[2];
    ASSERT_EQ(poll_n(cq[1], wc, 2), 2);  // both delivered, in order
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc[0].wr_id, 10u);
    EXPECT_EQ(wc[1].wr_id, 11u);
    EXPECT_STREQ(reinterpret_cast<char *>(buf[1].data()), "first");
    EXPECT_STREQ(reinterpret_cast<char *>(buf[1].data() + 64), "second");
    EXPECT_EQ(poll_n(cq[0], wc, 1, 100), 0);  // no acknowledgement reaches the sender
    ASSERT_EQ(poll_n(cq[0], wc, 2), 2);
    EXPECT_EQ(wc[0].wr_id, 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(wc[1].wr_id, 2u);
    EXPECT_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(poll_n(cq[1], wc, 1, 50), 0);  // the retransmissions delivered nothing again
    EXPECT_GT(counter_ctl(0, "local_ack_timeout_err"), 0);

    // The other way through the same link: node 1's RDMA WRITE lands at node 0, its ACK is lost on the way back.
    ibv_qp *c, *d;
    rc_pair(c, d, 3, 14);
    buf[1][128] = 42;
    buf[0][128] = 0;
    ASSERT_EQ(post_send_simple(d, mr[1], buf[1].data() + 128, 1, 3, IBV_WR_RDMA_WRITE,
                               reinterpret_cast<uintptr_t>(buf[0].data() + 128), mr[0]->rkey),
              0);
    ASSERT_EQ(poll_n(cq[1], wc, 1), 1);
    EXPECT_EQ(wc[0].wr_id, 3u);
    EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(buf[0][128], 42);  // written all the same

    // Restored within the retry budget: a retransmission's answer gets through and completes the send, once.
    ibv_qp *e, *f;
    rc_pair(e, f, 3, 14);
    ASSERT_EQ(post_recv_simple(f, mr[1], buf[1].data() + 256, 64, 20), 0);
    ASSERT_EQ(post_send_simple(e, mr[0], buf[0].data(), 6, 4), 0);
    ASSERT_EQ(poll_n(cq[1], wc, 1), 1);
    EXPECT_EQ(wc[0].wr_id, 20u);
    ASSERT_EQ(ctl(1, "fault ack-restore"), 0);
    ASSERT_EQ(poll_n(cq[0], wc, 1), 1);
    EXPECT_EQ(wc[0].wr_id, 4u);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(poll_n(cq[1], wc, 1, 50), 0);  // delivered once
}

// The same over XRC (what the BTL's rails use): the SEND reaches the SRQ once, the INI QP's WR ends in error.
TEST_F(TwoNode, AckDropOnXrcDeliversToTheSrqOnce) {
    Xrc x;
    ASSERT_NO_FATAL_FAILURE(xrc_pair(x, true, 3, 14));
    for (uint32_t i = 0; i < 2; ++i)
        ASSERT_EQ(post_srq_recv_simple(x.srq, mr[1], buf[1].data() + i * 128, 128, 40 + i), 0);
    ASSERT_EQ(ctl(0, "fault ack-drop --port 1"), 0);  // the sender's own link this time
    std::memcpy(buf[0].data(), "over a dying link", 18);
    ASSERT_EQ(post_send_simple(x.ini, mr[0], buf[0].data(), 18, 1, IBV_WR_SEND, 0, 0, x.srqn), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq[1], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 40u);
    EXPECT_EQ(wc.src_qp, x.ini->qp_num);
    EXPECT_STREQ(reinterpret_cast<char *>(buf[1].data()), "over a dying link");
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(poll_n(cq[1], &wc, 1, 50), 0);  // the retransmissions reached the SRQ no second time

    // A link that comes up again is a new one: it loses nothing.
    ASSERT_EQ(ctl(0, "fault port-up --port 1"), 0);
    Xrc y;
    ASSERT_NO_FATAL_FAILURE(xrc_pair(y, true, 3, 14));
    ASSERT_EQ(post_srq_recv_simple(y.srq, mr[1], buf[1].data() + 512, 128, 50), 0);
    ASSERT_EQ(post_send_simple(y.ini, mr[0], buf[0].data(), 18, 2, IBV_WR_SEND, 0, 0, y.srqn), 0);
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    close(x.fd);
    close(y.fd);
}

TEST_F(TwoNode, XrcAcrossNodes) {
    Xrc x;
    ASSERT_NO_FATAL_FAILURE(xrc_pair(x));
    ASSERT_EQ(post_srq_recv_simple(x.srq, mr[1], buf[1].data(), 128, 42), 0);
    std::memcpy(buf[0].data(), "over the fabric", 16);
    ASSERT_EQ(post_send_simple(x.ini, mr[0], buf[0].data(), 16, 1, IBV_WR_SEND, 0, 0, x.srqn), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq[1], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 42u);
    EXPECT_EQ(wc.qp_num, x.tgt->qp_num);
    EXPECT_EQ(wc.src_qp, x.ini->qp_num);
    EXPECT_STREQ(reinterpret_cast<char *>(buf[1].data()), "over the fabric");
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    close(x.fd);
}

// The subnet manager gives nb's port a new LID: both daemons route the new LID to nb and the old one to
// nobody, and a QP toward nb carries on once it has migrated to a path with the new LID; a send posted
// toward the old LID before the migration is retransmitted on the new path, not lost.
TEST_F(TwoNode, LidChangeReroutesAndPathMigrationCarriesOn) {
    ibv_qp *a, *b;
    rc_pair(a, b);
    ASSERT_NE(ctl(1, "fault lid --port 1 --lid 1 2>/dev/null"), 0);  // na holds LID 1 on that fabric
    ASSERT_EQ(ctl(1, "fault lid --port 1 --lid 0x22"), 0);
    ibv_port_attr pa;
    ASSERT_EQ(ibv_query_port(ctx[1], 1, &pa), 0);
    EXPECT_EQ(pa.lid, 0x22);

    for (size_t i = 0; i < 5000; ++i) buf[0][i] = uint8_t(i * 7 + 1);
    ASSERT_EQ(post_recv_simple(b, mr[1], buf[1].data(), 8192, 1), 0);
    ASSERT_EQ(post_send_simple(a, mr[0], buf[0].data(), 5000, 2), 0);  // toward the old LID: nobody answers
    ibv_wc wc;
    EXPECT_EQ(poll_n(cq[1], &wc, 1, 300), 0);

    // Software-controlled migration to the new LID: load, arm, migrate.
    ibv_qp_attr alt{};
    alt.qp_state = IBV_QPS_RTS;
    alt.alt_ah_attr.dlid = 0x22;
    alt.alt_ah_attr.port_num = 1;
    alt.alt_port_num = 1;
    alt.alt_timeout = 14;
    alt.path_mig_state = IBV_MIG_REARM;
    ASSERT_EQ(ibv_modify_qp(a, &alt, IBV_QP_STATE | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE), 0);
    ibv_qp_attr mig{};
    mig.qp_state = IBV_QPS_RTS;
    mig.path_mig_state = IBV_MIG_MIGRATED;
    ASSERT_EQ(ibv_modify_qp(a, &mig, IBV_QP_STATE | IBV_QP_PATH_MIG_STATE), 0);

    ASSERT_EQ(poll_n(cq[1], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 5000u);
    EXPECT_EQ(std::memcmp(buf[0].data(), buf[1].data(), 5000), 0);
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);

    // The other way: nb's packets now carry source LID 0x22. na's QP checks them against its primary path,
    // which has migrated; an RDMA WRITE from nb lands.
    std::memset(buf[1].data() + 100000, 0x5a, 3000);
    ASSERT_EQ(post_send_simple(b, mr[1], buf[1].data() + 100000, 3000, 3, IBV_WR_RDMA_WRITE,
                               uint64_t(buf[0].data() + 200000), mr[0]->rkey),
              0);
    ASSERT_EQ(poll_n(cq[1], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(buf[0][200000], 0x5a);
    EXPECT_EQ(buf[0][200000 + 2999], 0x5a);
    EXPECT_EQ(buf[0][200000 + 3000], 0);
}

// The sender's node gets the new LID: the XRC TGT QP on the receiving node refuses the INI QP's packets from
// the new source LID (its address vector still names the old one) until it has migrated to a path with it;
// then the retransmitted SEND lands in the SRQ, data checked.
TEST_F(TwoNode, LidChangeOfTheSenderTgtQpMigrates) {
    Xrc x;
    ASSERT_NO_FATAL_FAILURE(xrc_pair(x));
    ASSERT_EQ(ctl(0, "fault lid --port 1 --lid 0x21"), 0);
    ASSERT_EQ(post_srq_recv_simple(x.srq, mr[1], buf[1].data(), 128, 42), 0);
    std::memcpy(buf[0].data(), "from a new LID", 15);
    ASSERT_EQ(post_send_simple(x.ini, mr[0], buf[0].data(), 15, 1, IBV_WR_SEND, 0, 0, x.srqn), 0);
    ibv_wc wc;
    EXPECT_EQ(poll_n(cq[1], &wc, 1, 300), 0);  // the TGT QP's address check drops it

    ibv_qp_attr alt{};
    alt.qp_state = IBV_QPS_RTS;
    alt.alt_ah_attr.dlid = 0x21;
    alt.alt_ah_attr.port_num = 1;
    alt.alt_port_num = 1;
    alt.alt_timeout = 14;
    alt.path_mig_state = IBV_MIG_REARM;
    ASSERT_EQ(ibv_modify_qp(x.tgt, &alt, IBV_QP_STATE | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE), 0);
    ibv_qp_attr mig{};
    mig.qp_state = IBV_QPS_RTS;
    mig.path_mig_state = IBV_MIG_MIGRATED;
    ASSERT_EQ(ibv_modify_qp(x.tgt, &mig, IBV_QP_STATE | IBV_QP_PATH_MIG_STATE), 0);

    ASSERT_EQ(poll_n(cq[1], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 42u);
    EXPECT_EQ(wc.slid, 0x21);
    EXPECT_STREQ(reinterpret_cast<char *>(buf[1].data()), "from a new LID");
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    close(x.fd);
}
