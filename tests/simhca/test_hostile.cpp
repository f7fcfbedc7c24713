// SPDX-License-Identifier: BSD-3-Clause
// Hostile clients: random control requests, forged handles, garbage in the
// shared rings. The daemon must answer with errors, never crash, and keep
// serving well-behaved clients.
#include <cstring>
#include <fcntl.h>
#include <string>
#include <random>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

#include "../../src/simhca/common/protocol.hpp"
#include "../../src/simhca/common/shm_layout.hpp"
#include "simhca_fixture.hpp"

using namespace simhca;
using namespace simhca::test;

namespace {

class Hostile : public DaemonTest {
protected:
    int raw_connect() {
        int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::string name = "simhca." + instance;
        std::memcpy(a.sun_path + 1, name.data(), name.size());
        if (connect(s, reinterpret_cast<sockaddr *>(&a), socklen_t(offsetof(sockaddr_un, sun_path) + 1 + name.size())))
            return -1;
        return s;
    }
    // One round trip; returns the daemon's errno (or -1 when the connection died). fds received are closed
    // unless `keep` is given.
    int call(int s, const proto::Request &req, proto::Response &resp, int *keep = nullptr, size_t len = sizeof(proto::Request)) {
        if (send(s, &req, len, MSG_NOSIGNAL) < 0) return -1;
        char ctl[CMSG_SPACE(sizeof(int) * 4)];
        iovec iov{&resp, sizeof(resp)};
        msghdr m{};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl;
        m.msg_controllen = sizeof(ctl);
        ssize_t n = recvmsg(s, &m, 0);
        if (n <= 0) return -1;
        for (cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            int nfd = int((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            int fds[4];
            std::memcpy(fds, CMSG_DATA(c), sizeof(int) * std::min(nfd, 4));
            for (int i = 0; i < nfd && i < 4; ++i) {
                if (keep && i == 0) *keep = fds[i];
                else close(fds[i]);
            }
        }
        return resp.err;
    }
    void expect_daemon_serves() {
        ibv_context *c = open_device();
        ASSERT_NE(c, nullptr) << "daemon died or stopped answering";
        ibv_pd *p = ibv_alloc_pd(c);
        EXPECT_NE(p, nullptr);
        if (p) ibv_dealloc_pd(p);
        ibv_close_device(c);
    }
};

TEST_F(Hostile, RandomRequestsGetErrorsNotCrashes) {
    std::mt19937 rng(1234);
    int answered = 0;
    for (int round = 0; round < 20; ++round) {
        int s = raw_connect();
        ASSERT_GE(s, 0);
        proto::Request req;
        proto::Response resp;
        if (round % 2) { // half of them get a context first
            std::memset(&req, 0, sizeof(req));
            req.op = uint32_t(proto::Op::Hello);
            req.hello = {proto::kMagic, proto::kVersion};
            ASSERT_EQ(call(s, req, resp), 0);
        }
        for (int i = 0; i < 300; ++i) {
            auto *b = reinterpret_cast<uint8_t *>(&req);
            for (size_t k = 0; k < sizeof(req); ++k) b[k] = uint8_t(rng());
            req.op = rng() % 40;
            if (i % 3 == 0) { // plausible handles make it further into the handlers
                req.h.handle = rng() % 64;
                req.create_qp.pd = rng() % 64;
                req.create_qp.send_cq = rng() % 64;
                req.create_qp.cap.max_send_wr = rng() % 64;
            }
            size_t len = (i % 7 == 0) ? rng() % sizeof(req) : sizeof(req); // short datagrams too
            int r = call(s, req, resp, nullptr, len);
            if (r < 0) break; // the daemon may drop a protocol-violating client
            ++answered;
        }
        close(s);
    }
    EXPECT_GT(answered, 3000); // most garbage is answered with an errno, not a hang-up
    expect_daemon_serves();
}

TEST_F(Hostile, ForeignHandlesAreRejected) {
    // Another context's objects are invisible: same numbers, other owner.
    ibv_context *other = open_device();
    ASSERT_NE(other, nullptr);
    ibv_pd fake = *pd;
    fake.context = other;
    EXPECT_EQ(ibv_dealloc_pd(&fake), EINVAL);
    std::vector<char> mem(4096);
    EXPECT_EQ(ibv_reg_mr(&fake, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE), nullptr);
    ibv_close_device(other);
    // The real owner still has its PD.
    ibv_mr *mr = ibv_reg_mr(pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    // Unmapped memory cannot be registered.
    void *hole = mmap(nullptr, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_EQ(ibv_reg_mr(pd, hole, 8192, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EFAULT);
    munmap(hole, 8192);
}

TEST_F(Hostile, GarbageInSharedRings) {
    int s = raw_connect();
    ASSERT_GE(s, 0);
    proto::Request req{};
    proto::Response resp{};
    req.op = uint32_t(proto::Op::Hello);
    req.hello = {proto::kMagic, proto::kVersion};
    int async_fd = -1;
    ASSERT_EQ(call(s, req, resp, &async_fd), 0);
    close(async_fd);
    // The doorbell came as the second fd and was closed by call(): get a new
    // context's worth of objects and kick via Op::Kick instead.
    req = {};
    req.op = uint32_t(proto::Op::AllocPd);
    ASSERT_EQ(call(s, req, resp), 0);
    uint32_t pdh = resp.h.handle;
    req = {};
    req.op = uint32_t(proto::Op::CreateCq);
    req.create_cq.cqe = 16;
    ASSERT_EQ(call(s, req, resp), 0);
    uint32_t cqh = resp.create_cq.handle;
    req = {};
    req.op = uint32_t(proto::Op::CreateQp);
    req.create_qp.type = IBV_QPT_RC;
    req.create_qp.pd = pdh;
    req.create_qp.send_cq = cqh;
    req.create_qp.recv_cq = cqh;
    req.create_qp.cap.max_send_wr = 8;
    req.create_qp.cap.max_recv_wr = 8;
    req.create_qp.cap.max_send_sge = 1;
    req.create_qp.cap.max_recv_sge = 1;
    int qfd = -1;
    ASSERT_EQ(call(s, req, resp, &qfd), 0);
    uint32_t qph = resp.create_qp.handle, qpn = resp.create_qp.qpn;
    size_t len = shm::qp_region_size(resp.create_qp.sq_entries, resp.create_qp.rq_entries);
    void *map = mmap(nullptr, (len + 4095) / 4096 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, qfd, 0);
    ASSERT_NE(map, MAP_FAILED);
    // Connect the QP to itself so that sends are executed.
    req = {};
    req.op = uint32_t(proto::Op::ModifyQp);
    req.modify_qp.handle = qph;
    req.modify_qp.attr.qp_state = IBV_QPS_INIT;
    req.modify_qp.attr.port_num = 1;
    req.modify_qp.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    ASSERT_EQ(call(s, req, resp), 0);
    req.modify_qp.attr.qp_state = IBV_QPS_RTR;
    req.modify_qp.attr.dest_qp_num = qpn;
    req.modify_qp.attr.ah_attr.dlid = 1;
    req.modify_qp.attr.path_mtu = IBV_MTU_1024;
    req.modify_qp.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    ASSERT_EQ(call(s, req, resp), 0);
    req.modify_qp.attr.qp_state = IBV_QPS_RTS;
    req.modify_qp.attr.timeout = 1;
    req.modify_qp.attr.retry_cnt = 1;
    req.modify_qp.attr.rnr_retry = 1;
    req.modify_qp.mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                         IBV_QP_MAX_QP_RD_ATOMIC;
    ASSERT_EQ(call(s, req, resp), 0);

    std::mt19937 rng(99);
    auto *ctl = static_cast<shm::QpCtl *>(map);
    auto *sq = reinterpret_cast<uint8_t *>(map) + shm::kQpSqOffset;
    for (int round = 0; round < 200; ++round) {
        for (size_t k = 0; k < size_t(8) * shm::kSendWqeSize; ++k) sq[k] = uint8_t(rng());
        auto *rq = reinterpret_cast<uint8_t *>(map) + shm::qp_rq_offset(8);
        for (size_t k = 0; k < size_t(8) * shm::kRecvWqeSize; ++k) rq[k] = uint8_t(rng());
        ctl->rq.head.store(round % 5 == 0 ? uint32_t(rng()) : ctl->rq.tail.load() + 3);
        ctl->sq.head.store(round % 4 == 0 ? uint32_t(rng()) : ctl->sq.tail.load() + 1 + rng() % 8);
        req = {};
        req.op = uint32_t(proto::Op::Kick);
        if (call(s, req, resp) < 0) break;
        if (round % 20 == 0) { // and back to a usable state
            req = {};
            req.op = uint32_t(proto::Op::ModifyQp);
            req.modify_qp.handle = qph;
            req.modify_qp.attr.qp_state = IBV_QPS_RESET;
            req.modify_qp.mask = IBV_QP_STATE;
            call(s, req, resp);
        }
    }
    munmap(map, (len + 4095) / 4096 * 4096);
    close(qfd);
    close(s);
    expect_daemon_serves();
}

} // namespace

// The third Hello fd is the daemon's "awake" word (clients skip the doorbell while it reads 1). A client
// that could write it would make every other client's posts wait: it must be read-only for clients, through
// that fd and through any reopening of it.
TEST_F(Hostile, AwakeWordIsReadOnly) {
    int s = raw_connect();
    ASSERT_GE(s, 0);
    proto::Request req{};
    proto::Response resp{};
    req.op = uint32_t(proto::Op::Hello);
    req.hello = {proto::kMagic, proto::kVersion};
    ASSERT_EQ(send(s, &req, sizeof(req), MSG_NOSIGNAL), ssize_t(sizeof(req)));
    char ctl[CMSG_SPACE(sizeof(int) * 4)];
    iovec iov{&resp, sizeof(resp)};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof(ctl);
    ASSERT_GT(recvmsg(s, &m, MSG_CMSG_CLOEXEC), 0);
    ASSERT_EQ(resp.err, 0);
    std::vector<int> fds;
    for (cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        int nfd = int((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < nfd; ++i) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            fds.push_back(fd);
        }
    }
    ASSERT_EQ(fds.size(), 3u) << "Hello passes the async pipe, the doorbell and the awake word";
    int fd = fds[2];
    EXPECT_EQ(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
    uint32_t one = 1;
    EXPECT_LT(pwrite(fd, &one, sizeof(one), 0), 0);
    int again = open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDWR | O_CLOEXEC);
    if (again >= 0) {
        EXPECT_EQ(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, again, 0), MAP_FAILED);
        EXPECT_LT(pwrite(again, &one, sizeof(one), 0), 0);
        close(again);
    }
    EXPECT_LT(ftruncate(fd, 0), 0);
    void *p = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(p, MAP_FAILED);
    uint32_t v = *static_cast<volatile uint32_t *>(p);
    EXPECT_LE(v, 1u);
    munmap(p, 4096);
    for (int f : fds) close(f);
    close(s);
    expect_daemon_serves();
}

// Posts that skip the doorbell (the daemon looked awake) are still executed: many small sends in a row,
// each checked at the receiver, without any other traffic to wake the daemon up.
TEST_F(Hostile, PostsWithoutDoorbellAreExecuted) {
    ibv_context *c = open_device();
    ASSERT_NE(c, nullptr);
    ibv_pd *pd = ibv_alloc_pd(c);
    ibv_cq *cq = ibv_create_cq(c, 64, nullptr, nullptr, 0);
    ASSERT_TRUE(pd && cq);
    std::vector<uint8_t> src(64), dst(64 * 32);
    ibv_mr *ms = ibv_reg_mr(pd, src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
    ibv_mr *md = ibv_reg_mr(pd, dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_TRUE(ms && md);
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 32;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    ibv_qp *qp = ibv_create_qp(pd, &ia);
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.dest_qp_num = qp->qp_num;
    a.ah_attr.dlid = 1;
    a.ah_attr.port_num = 1;
    a.path_mtu = IBV_MTU_1024;
    ASSERT_EQ(ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              0);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    ASSERT_EQ(ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                IBV_QP_MAX_QP_RD_ATOMIC),
              0);
    for (int round = 0; round < 200; ++round) {
        for (int i = 0; i < 32; ++i) {
            ibv_sge g{reinterpret_cast<uintptr_t>(dst.data() + 64 * i), 64, md->lkey};
            ibv_recv_wr r{};
            r.wr_id = uint64_t(i);
            r.sg_list = &g;
            r.num_sge = 1;
            ibv_recv_wr *bad;
            ASSERT_EQ(ibv_post_recv(qp, &r, &bad), 0);
        }
        // One WR per post: each post publishes its index and decides alone whether to ring.
        for (int i = 0; i < 32; ++i) {
            std::memset(src.data(), round * 32 + i, src.size());
            ibv_sge g{reinterpret_cast<uintptr_t>(src.data()), 64, ms->lkey};
            ibv_send_wr w{};
            w.wr_id = uint64_t(i);
            w.sg_list = &g;
            w.num_sge = 1;
            w.opcode = IBV_WR_SEND;
            w.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
            ibv_send_wr *bad;
            ASSERT_EQ(ibv_post_send(qp, &w, &bad), 0);
        }
        int done = 0;
        while (done < 64) {
            ibv_wc wc[16];
            int n = ibv_poll_cq(cq, 16, wc);
            ASSERT_GE(n, 0);
            for (int k = 0; k < n; ++k) ASSERT_EQ(wc[k].status, IBV_WC_SUCCESS);
            done += n;
        }
        for (int i = 0; i < 32; ++i)
            ASSERT_EQ(dst[64 * i + 63], uint8_t(round * 32 + i)) << "round " << round << " message " << i;
    }
    ibv_destroy_qp(qp);
    ibv_dereg_mr(ms);
    ibv_dereg_mr(md);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    ibv_close_device(c);
}
