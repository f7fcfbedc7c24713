// SPDX-License-Identifier: BSD-3-Clause
#include "two_node_fixture.hpp"

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "simhca_fixture.hpp"

namespace simhca::test {

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

}  // namespace

void TwoNode::SetUp() {
    static int counter = 0;
    std::string base = "gtest2-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    char tmpl[] = "/tmp/simhca-gtest2-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
    fabric = dir + "/fabric";
    auto [pa, pb] = free_ports();
    const char *la = two_rails ? "1,101" : "1", *lb = two_rails ? "2,102" : "2";
    std::ofstream(fabric) << "# test fabric\nnode na lid " << la << " addr 127.0.0.1 port " << pa << "\nnode nb lid "
                          << lb << " addr 127.0.0.1 port " << pb << "\n";
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
            prctl(PR_SET_PDEATHSIG, SIGTERM);  // never outlive the test
            execl(simhcad.c_str(), "simhcad", "--node", node.c_str(), "--fabric", fabric.c_str(), "--sysfs",
                  sys.c_str(), "--ports", two_rails ? "2" : "1", (char *)nullptr);
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
        mr[i] = ibv_reg_mr(
            pd[i], buf[i].data(), buf[i].size(),
            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
        ASSERT_TRUE(pd[i] && cq[i] && mr[i]);
    }
}

void TwoNode::TearDown() {
    for (int i = 0; i < 2; ++i) {
        if (ctx[i]) ibv_close_device(ctx[i]);
        if (pid[i] > 0) {
            kill(pid[i], SIGTERM);
            int st = 0;
            waitpid(pid[i], &st, 0);
            EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        }
    }
    std::error_code ignored;  // a scratch directory: what cannot be removed is left, as rm -rf would
    std::filesystem::remove_all(dir, ignored);
}

void TwoNode::use(int i) {
    setenv("SIMHCA_INSTANCE", inst[i].c_str(), 1);
}

void TwoNode::rc_pair(ibv_qp *&a, ibv_qp *&b, uint8_t retry_cnt, uint8_t timeout) {
    a = create_rc(pd[0], cq[0], nullptr, 256);
    b = create_rc(pd[1], cq[1], nullptr, 256);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(connect_remote(a, b->qp_num, 2, retry_cnt, timeout), 0);
    ASSERT_EQ(connect_remote(b, a->qp_num, 1, retry_cnt, timeout), 0);
}

int TwoNode::connect_remote(ibv_qp *qp, uint32_t rqpn, uint16_t dlid, uint8_t retry_cnt, uint8_t timeout,
                            uint8_t port) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = port;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    if (int e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return e;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = rqpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.ah_attr.dlid = dlid;
    a.ah_attr.port_num = port;
    int m = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
            IBV_QP_MIN_RNR_TIMER;
    if (int e = ibv_modify_qp(qp, &a, m)) return e;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = timeout;
    a.retry_cnt = retry_cnt;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    m = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
    return ibv_modify_qp(qp, &a, m);
}

namespace {
std::string ctl_command(const std::string &instance, const std::string &args) {
    const char *c = std::getenv("SIMHCA_CTL");
    return "SIMHCA_INSTANCE=" + instance + " " + (c && *c ? c : "../../src/simhca/simhca-ctl") + " " + args;
}
}  // namespace

int TwoNode::ctl(int i, const std::string &args) {
    return std::system(ctl_command(inst[i], args).c_str());
}

void TwoNode::xrc_pair(Xrc &x, bool ready_tgt, uint8_t retry_cnt, uint8_t timeout) {
    x.fd = open((dir + "/xrcd").c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(x.fd, 0);
    ibv_xrcd_init_attr xa{};
    xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    xa.fd = x.fd;
    xa.oflags = O_CREAT;
    x.xrcd = ibv_open_xrcd(ctx[1], &xa);
    ASSERT_NE(x.xrcd, nullptr);
    ibv_srq_init_attr_ex sa{};
    sa.attr.max_wr = 8;
    sa.attr.max_sge = 1;
    sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
    sa.srq_type = IBV_SRQT_XRC;
    sa.xrcd = x.xrcd;
    sa.cq = cq[1];
    sa.pd = pd[1];
    x.srq = ibv_create_srq_ex(ctx[1], &sa);
    ASSERT_NE(x.srq, nullptr);
    ASSERT_EQ(ibv_get_srq_num(x.srq, &x.srqn), 0);
    ibv_qp_init_attr_ex ta{};
    ta.qp_type = IBV_QPT_XRC_RECV;
    ta.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    ta.xrcd = x.xrcd;
    x.tgt = ibv_create_qp_ex(ctx[1], &ta);
    ibv_qp_init_attr_ex ia{};
    ia.qp_type = IBV_QPT_XRC_SEND;
    ia.send_cq = cq[0];
    ia.cap.max_send_wr = 4;
    ia.cap.max_send_sge = 1;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD;
    ia.pd = pd[0];
    x.ini = ibv_create_qp_ex(ctx[0], &ia);
    ASSERT_TRUE(x.tgt && x.ini);
    ASSERT_EQ(connect_remote(x.ini, x.tgt->qp_num, 2, retry_cnt, timeout), 0);
    if (ready_tgt) {
        ASSERT_EQ(connect_remote(x.tgt, x.ini->qp_num, 1, retry_cnt, timeout), 0);
    } else {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        ASSERT_EQ(ibv_modify_qp(x.tgt, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
    }
}

long long TwoNode::counter_file(int i, const std::string &name) const {
    std::ifstream in(dir + "/sys-" + (i ? "nb" : "na") + "/ports/1/hw_counters/" + name);
    long long v = -1;
    return in >> v ? v : -1;
}

long long TwoNode::counter_ctl(int i, const std::string &name) const {
    FILE *p = popen(ctl_command(inst[i], "counters").c_str(), "r");
    if (!p) return -1;
    char n[128];
    long long v, found = -1;
    while (std::fscanf(p, "%127s %lld", n, &v) == 2)
        if (name == n) found = v;
    pclose(p);
    return found;
}

}  // namespace simhca::test
