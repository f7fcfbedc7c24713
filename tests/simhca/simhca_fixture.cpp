// SPDX-License-Identifier: BSD-3-Clause
#include "simhca_fixture.hpp"

#include <atomic>
#include <poll.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace simhca::test {

namespace {
std::string env_or(const char *name, const char *dflt) {
    const char *v = std::getenv(name);
    return v && *v ? v : dflt;
}
}  // namespace

void DaemonTest::SetUp() {
    static std::atomic<int> counter{0};
    instance = "gtest-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    ::setenv("SIMHCA_INSTANCE", instance.c_str(), 1);
    char tmpl[] = "/tmp/simhca-gtest-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmpdir = tmpl;
    std::string simhcad = env_or("SIMHCAD", "../../src/simhca/simhcad");
    daemon_pid = ::fork();
    ASSERT_GE(daemon_pid, 0);
    if (daemon_pid == 0) {
        // Never outlive the test process (a crashed test must not leave a
        // daemon behind), and keep the test's stdout free (pipes would wait).
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        int log = ::open((tmpdir + "/simhcad.log").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (log >= 0) {
            ::dup2(log, 1);
            ::dup2(log, 2);
        }
        std::string sysfs = tmpdir + "/sysfs";
        std::vector<const char *> argv = {"simhcad", "--node", "gtest", "--sysfs", sysfs.c_str()};
        for (const std::string &a : daemon_args) argv.push_back(a.c_str());
        argv.push_back(nullptr);
        ::execv(simhcad.c_str(), const_cast<char *const *>(argv.data()));
        std::perror("exec simhcad");
        ::_exit(127);
    }
    for (int i = 0; i < 500 && !ctx; ++i) {
        ctx = open_device();
        if (!ctx) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_NE(ctx, nullptr) << "simhcad did not come up";
    pd = ibv_alloc_pd(ctx);
    ASSERT_NE(pd, nullptr);
    cq = ibv_create_cq(ctx, 256, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
}

void DaemonTest::TearDown() {
    if (ctx) ibv_close_device(ctx);  // the daemon releases everything left
    if (daemon_pid > 0) {
        ::kill(daemon_pid, SIGTERM);
        int st = 0;
        ::waitpid(daemon_pid, &st, 0);
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "simhcad did not exit cleanly: " << st;
    }
    if (!tmpdir.empty()) {
        std::error_code ignored;  // a scratch directory: what cannot be removed is left, as rm -rf would
        std::filesystem::remove_all(tmpdir, ignored);
    }
}

int DaemonTest::ctl(const std::string &args) {
    std::string c = env_or("SIMHCA_CTL", "../../src/simhca/simhca-ctl");
    int st = std::system((c + " " + args).c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

std::string DaemonTest::ctl_list_json() {
    std::string ctl = env_or("SIMHCA_CTL", "../../src/simhca/simhca-ctl");
    FILE *p = ::popen((ctl + " list --json").c_str(), "r");
    if (!p) return {};
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    ::pclose(p);
    return out;
}

long DaemonTest::ctl_count(const std::string &key) {
    std::string j = ctl_list_json();
    auto pos = j.find("\"" + key + "\":");
    if (pos == std::string::npos) return -1;
    return std::strtol(j.c_str() + pos + key.size() + 3, nullptr, 10);
}

bool DaemonTest::wait_count(const std::string &key, long want) {
    for (int i = 0; i < 200; ++i) {
        if (ctl_count(key) == want) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

ibv_context *open_device() {
    int n = 0;
    ibv_device **list = ibv_get_device_list(&n);
    ibv_context *c = nullptr;
    if (list && n > 0) c = ibv_open_device(list[0]);
    if (list) ibv_free_device_list(list);
    return c;
}

ibv_qp *create_rc(ibv_pd *pd, ibv_cq *cq, ibv_srq *srq, uint32_t depth) {
    ibv_qp_init_attr a{};
    a.send_cq = cq;
    a.recv_cq = cq;
    a.srq = srq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = depth;
    a.cap.max_recv_wr = depth;
    a.cap.max_send_sge = 4;
    a.cap.max_recv_sge = 4;
    return ibv_create_qp(pd, &a);
}

int connect_qp(ibv_qp *qp, uint32_t remote_qpn, uint8_t rnr_retry, uint8_t min_rnr_timer, int access, uint8_t retry_cnt,
               uint8_t timeout, uint8_t port, uint16_t dlid) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = port;
    a.qp_access_flags = access;
    if (int e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return e;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = min_rnr_timer;
    a.ah_attr.dlid = dlid;
    a.ah_attr.port_num = port;
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (qp->qp_type != IBV_QPT_XRC_SEND) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    if (int e = ibv_modify_qp(qp, &a, mask)) return e;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = timeout;
    a.retry_cnt = retry_cnt;
    a.rnr_retry = rnr_retry;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
    if (qp->qp_type != IBV_QPT_XRC_RECV) mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    return ibv_modify_qp(qp, &a, mask);
}

int poll_n(ibv_cq *cq, ibv_wc *wc, int n, int timeout_ms) {
    int got = 0;
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (got < n && std::chrono::steady_clock::now() < end) {
        int r = ibv_poll_cq(cq, n - got, wc + got);
        if (r < 0) return -1;
        got += r;
        if (!r) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return got;
}

int post_send_simple(ibv_qp *qp, ibv_mr *mr, void *buf, uint32_t len, uint64_t wr_id, ibv_wr_opcode op, uint64_t raddr,
                     uint32_t rkey, uint32_t remote_srqn) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf), len, mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        wr.wr.atomic.remote_addr = raddr;
        wr.wr.atomic.rkey = rkey;
    } else {
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = rkey;
    }
    wr.qp_type.xrc.remote_srqn = remote_srqn;
    return ibv_post_send(qp, &wr, &bad);
}

int post_recv_simple(ibv_qp *qp, ibv_mr *mr, void *buf, uint32_t len, uint64_t wr_id) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf), len, mr->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_recv(qp, &wr, &bad);
}

int post_srq_recv_simple(ibv_srq *srq, ibv_mr *mr, void *buf, uint32_t len, uint64_t wr_id) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf), len, mr->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_srq_recv(srq, &wr, &bad);
}

bool next_async_event(ibv_context *ctx, ibv_async_event &ev, int timeout_ms) {
    pollfd pf{ctx->async_fd, POLLIN, 0};
    if (poll(&pf, 1, timeout_ms) != 1) return false;
    return ibv_get_async_event(ctx, &ev) == 0;
}

}  // namespace simhca::test
