// Two simulated nodes on the host: two daemons (private instances) joined
// by a fabric file on 127.0.0.1. Checks data crossing daemons, XRC across
// nodes, and the transport retry rules when a node's traffic is lost.
#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "simhca_fixture.hpp"

using namespace simhca::test;

namespace {

// Two distinct free ports: both sockets stay open until both are known.
std::pair<uint16_t, uint16_t> free_ports() {
    int s[2];
    uint16_t p[2];
    for (int i = 0; i < 2; ++i) {
        s[i] = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        bind(s[i], reinterpret_cast<sockaddr *>(&a), sizeof(a));
        socklen_t l = sizeof(a);
        getsockname(s[i], reinterpret_cast<sockaddr *>(&a), &l);
        p[i] = ntohs(a.sin_port);
    }
    close(s[0]);
    close(s[1]);
    return {p[0], p[1]};
}

class TwoNode : public ::testing::Test {
protected:
    void SetUp() override {
        static int counter = 0;
        std::string base = "gtest2-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
        char tmpl[] = "/tmp/simhca-gtest2-XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir = tmpl;
        fabric = dir + "/fabric";
        auto [pa, pb] = free_ports();
        std::ofstream(fabric) << "# test fabric\nnode na lid 1 addr 127.0.0.1 port " << pa
                              << "\nnode nb lid 2 addr 127.0.0.1 port " << pb << "\n";
        const char *d = std::getenv("SIMHCAD");
        std::string simhcad = d && *d ? d : "../../src/simhca/simhcad";
        for (int i = 0; i < 2; ++i) {
            inst[i] = base + (i ? "-b" : "-a");
            pid[i] = fork();
            ASSERT_GE(pid[i], 0);
            if (pid[i] == 0) {
                setenv("SIMHCA_INSTANCE", inst[i].c_str(), 1);
                std::string node = i ? "nb" : "na", sys = dir + "/sys-" + node;
                std::string log = dir + "/" + node + ".log";
                int fd = open(log.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
                if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
                prctl(PR_SET_PDEATHSIG, SIGTERM); // never outlive the test
                execl(simhcad.c_str(), "simhcad", "--node", node.c_str(), "--fabric", fabric.c_str(), "--sysfs",
                      sys.c_str(), (char *)nullptr);
                _exit(127);
            }
        }
        for (int i = 0; i < 2; ++i) {
            use(i);
            for (int k = 0; k < 500 && !ctx[i]; ++k) {
                ctx[i] = open_device();
                if (!ctx[i]) std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
            ASSERT_NE(ctx[i], nullptr) << "daemon " << i << " did not come up; see its log in " << dir;
            pd[i] = ibv_alloc_pd(ctx[i]);
            cq[i] = ibv_create_cq(ctx[i], 256, nullptr, nullptr, 0);
            buf[i].assign(1 << 20, 0);
            mr[i] = ibv_reg_mr(pd[i], buf[i].data(), buf[i].size(),
                               IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                   IBV_ACCESS_REMOTE_ATOMIC);
            ASSERT_TRUE(pd[i] && cq[i] && mr[i]);
        }
    }
    void TearDown() override {
        for (int i = 0; i < 2; ++i) {
            if (ctx[i]) ibv_close_device(ctx[i]);
            if (pid[i] > 0) {
                kill(pid[i], SIGTERM);
                int st = 0;
                waitpid(pid[i], &st, 0);
                EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
            }
        }
        std::system(("rm -rf '" + dir + "'").c_str());
    }
    void use(int i) { setenv("SIMHCA_INSTANCE", inst[i].c_str(), 1); }
    // Connects an RC QP on each node to the other (LIDs 1 and 2).
    void rc_pair(ibv_qp *&a, ibv_qp *&b, uint8_t retry_cnt = 7, uint8_t timeout = 14) {
        a = create_rc(pd[0], cq[0], nullptr, 256);
        b = create_rc(pd[1], cq[1], nullptr, 256);
        ASSERT_TRUE(a && b);
        ASSERT_EQ(connect_remote(a, b->qp_num, 2, retry_cnt, timeout), 0);
        ASSERT_EQ(connect_remote(b, a->qp_num, 1, retry_cnt, timeout), 0);
    }
    static int connect_remote(ibv_qp *qp, uint32_t rqpn, uint16_t dlid, uint8_t retry_cnt, uint8_t timeout) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        if (int e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
            return e;
        a = {};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_4096;
        a.dest_qp_num = rqpn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 1;
        a.ah_attr.dlid = dlid;
        a.ah_attr.port_num = 1;
        int m = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        if (int e = ibv_modify_qp(qp, &a, m)) return e;
        a = {};
        a.qp_state = IBV_QPS_RTS;
        a.timeout = timeout;
        a.retry_cnt = retry_cnt;
        a.rnr_retry = 7;
        a.max_rd_atomic = 1;
        m = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
            IBV_QP_MAX_QP_RD_ATOMIC;
        return ibv_modify_qp(qp, &a, m);
    }
    int ctl(int i, const std::string &args) {
        const char *c = std::getenv("SIMHCA_CTL");
        std::string cmd = "SIMHCA_INSTANCE=" + inst[i] + " " + (c && *c ? c : "../../src/simhca/simhca-ctl") + " " + args;
        return std::system(cmd.c_str());
    }
    std::string dir, fabric, inst[2];
    pid_t pid[2] = {-1, -1};
    ibv_context *ctx[2] = {};
    ibv_pd *pd[2] = {};
    ibv_cq *cq[2] = {};
    ibv_mr *mr[2] = {};
    std::vector<uint8_t> buf[2];
};

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

TEST_F(TwoNode, XrcAcrossNodes) {
    std::string path = dir + "/xrcd";
    int fd = open(path.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    ibv_xrcd_init_attr xa{};
    xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    xa.fd = fd;
    xa.oflags = O_CREAT;
    ibv_xrcd *x = ibv_open_xrcd(ctx[1], &xa);
    ASSERT_NE(x, nullptr);
    ibv_srq_init_attr_ex sa{};
    sa.attr.max_wr = 8;
    sa.attr.max_sge = 1;
    sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
    sa.srq_type = IBV_SRQT_XRC;
    sa.xrcd = x;
    sa.cq = cq[1];
    sa.pd = pd[1];
    ibv_srq *srq = ibv_create_srq_ex(ctx[1], &sa);
    ASSERT_NE(srq, nullptr);
    uint32_t srqn;
    ASSERT_EQ(ibv_get_srq_num(srq, &srqn), 0);
    ibv_qp_init_attr_ex ta{};
    ta.qp_type = IBV_QPT_XRC_RECV;
    ta.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    ta.xrcd = x;
    ibv_qp *tgt = ibv_create_qp_ex(ctx[1], &ta);
    ibv_qp_init_attr_ex ia{};
    ia.qp_type = IBV_QPT_XRC_SEND;
    ia.send_cq = cq[0];
    ia.cap.max_send_wr = 4;
    ia.cap.max_send_sge = 1;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD;
    ia.pd = pd[0];
    ibv_qp *ini = ibv_create_qp_ex(ctx[0], &ia);
    ASSERT_TRUE(tgt && ini);
    ASSERT_EQ(connect_remote(ini, tgt->qp_num, 2, 7, 14), 0);
    ASSERT_EQ(connect_remote(tgt, ini->qp_num, 1, 7, 14), 0);
    ASSERT_EQ(post_srq_recv_simple(srq, mr[1], buf[1].data(), 128, 42), 0);
    std::memcpy(buf[0].data(), "over the fabric", 16);
    ASSERT_EQ(post_send_simple(ini, mr[0], buf[0].data(), 16, 1, IBV_WR_SEND, 0, 0, srqn), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(cq[1], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 42u);
    EXPECT_EQ(wc.qp_num, tgt->qp_num);
    EXPECT_EQ(wc.src_qp, ini->qp_num);
    EXPECT_STREQ(reinterpret_cast<char *>(buf[1].data()), "over the fabric");
    ASSERT_EQ(poll_n(cq[0], &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    close(fd);
}

} // namespace
