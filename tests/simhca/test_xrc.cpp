// SPDX-License-Identifier: BSD-3-Clause
// XRC: domains shared by inode between processes (EAGAIN / EINVAL rules),
// TGT QP lifetime across processes (last handle destroys), routing by
// remote_srqn with the XRCD check, completion fields.
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "simhca_fixture.hpp"

using namespace simhca::test;

namespace {

class Xrc : public DaemonTest {
protected:
    void SetUp() override {
        DaemonTest::SetUp();
        for (auto *p : {&path_a, &path_b}) {
            *p = tmpdir + (p == &path_a ? "/xrcd-a" : "/xrcd-b");
            int fd = ::open(p->c_str(), O_CREAT | O_RDWR, 0600);
            ASSERT_GE(fd, 0);
            ::close(fd);
        }
    }
    std::string path_a, path_b;
};

ibv_xrcd *open_xrcd_path(ibv_context *ctx, const std::string &path, int oflags, int *err = nullptr) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return nullptr;
    ibv_xrcd_init_attr xa{};
    xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    xa.fd = fd;
    xa.oflags = oflags;
    errno = 0;
    ibv_xrcd *x = ibv_open_xrcd(ctx, &xa);
    if (err) *err = errno;
    ::close(fd); // the domain is keyed by the inode, not this fd
    return x;
}

ibv_qp *create_tgt(ibv_context *ctx, ibv_xrcd *x) {
    ibv_qp_init_attr_ex a{};
    a.qp_type = IBV_QPT_XRC_RECV;
    a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    a.xrcd = x;
    return ibv_create_qp_ex(ctx, &a);
}

ibv_qp *open_tgt(ibv_context *ctx, ibv_xrcd *x, uint32_t qpn) {
    ibv_qp_open_attr oa{};
    oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    oa.qp_num = qpn;
    oa.xrcd = x;
    oa.qp_type = IBV_QPT_XRC_RECV;
    return ibv_open_qp(ctx, &oa);
}

// Runs `fn` in a child process with its own verbs context; returns its exit code.
template <class Fn> int in_child(Fn fn) {
    pid_t p = ::fork();
    if (p == 0) {
        ibv_context *c = open_device();
        ::_exit(c ? fn(c) : 99);
    }
    int st = 0;
    ::waitpid(p, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

TEST_F(Xrc, DomainIsSharedByInodeWithKernelErrors) {
    int err = 0;
    EXPECT_EQ(open_xrcd_path(ctx, path_a, 0, &err), nullptr);
    EXPECT_EQ(err, EAGAIN); // no domain for that inode and no O_CREAT
    ibv_xrcd *x = open_xrcd_path(ctx, path_a, O_CREAT);
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(open_xrcd_path(ctx, path_a, O_CREAT | O_EXCL, &err), nullptr);
    EXPECT_EQ(err, EINVAL); // exists and O_EXCL
    EXPECT_EQ(ctl_count("xrcds"), 1);
    // Another process opening the same file joins the same domain.
    std::string pa = path_a, pb = path_b;
    EXPECT_EQ(in_child([&](ibv_context *c) {
                  ibv_xrcd *cx = open_xrcd_path(c, pa, 0);
                  if (!cx) return 1;
                  ibv_xrcd *other = open_xrcd_path(c, pb, O_CREAT);
                  if (!other) return 2;
                  return 0;
              }),
              0);
    // The child's domain for path_b died with it; path_a's lives on.
    EXPECT_TRUE(wait_count("xrcds", 1));
    EXPECT_EQ(ibv_close_xrcd(x), 0);
    EXPECT_EQ(ctl_count("xrcds"), 0);
    EXPECT_EQ(open_xrcd_path(ctx, path_a, 0, &err), nullptr); // last close destroyed it
    EXPECT_EQ(err, EAGAIN);
}

TEST_F(Xrc, TgtQpOutlivesCreatorOnlyWhenOpenedElsewhere) {
    ibv_xrcd *x = open_xrcd_path(ctx, path_a, O_CREAT);
    ASSERT_NE(x, nullptr);
    int to_child[2], to_parent[2];
    ASSERT_EQ(pipe(to_child), 0);
    ASSERT_EQ(pipe(to_parent), 0);
    // Case 1: the child creates a TGT QP, we open it, the child exits: it survives.
    std::string pa = path_a;
    pid_t p = ::fork();
    if (p == 0) {
        ibv_context *c = open_device();
        ibv_xrcd *cx = c ? open_xrcd_path(c, pa, 0) : nullptr;
        ibv_qp *t = cx ? create_tgt(c, cx) : nullptr;
        uint32_t qpn = t ? t->qp_num : 0;
        (void)!write(to_parent[1], &qpn, 4);
        char go;
        (void)!read(to_child[0], &go, 1);
        ::_exit(0); // no cleanup: the daemon must do it
    }
    uint32_t qpn = 0;
    ASSERT_EQ(read(to_parent[0], &qpn, 4), 4);
    ASSERT_NE(qpn, 0u);
    ibv_qp *mine = open_tgt(ctx, x, qpn);
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ(mine->qp_num, qpn);
    ASSERT_EQ(write(to_child[1], "g", 1), 1);
    int st;
    waitpid(p, &st, 0);
    ASSERT_TRUE(wait_count("clients", 1));
    EXPECT_EQ(ctl_count("qps"), 1);
    ASSERT_EQ(connect_qp(mine, 0x77), 0); // modify through any handle acts on the shared QP
    ibv_qp_attr qa{};
    ibv_qp_init_attr ia{};
    ASSERT_EQ(ibv_query_qp(mine, &qa, IBV_QP_STATE, &ia), 0);
    EXPECT_EQ(qa.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(ibv_destroy_qp(mine), 0); // last handle: gone
    EXPECT_EQ(ctl_count("qps"), 0);
    errno = 0;
    EXPECT_EQ(open_tgt(ctx, x, qpn), nullptr);
    EXPECT_EQ(errno, EINVAL);

    // Case 2: a TGT QP nobody else opened dies with its creator.
    int code = in_child([&](ibv_context *c) {
        ibv_xrcd *cx = open_xrcd_path(c, pa, 0);
        ibv_qp *t = cx ? create_tgt(c, cx) : nullptr;
        return t ? int(t->qp_num & 0x7f) : 255;
    });
    ASSERT_NE(code, 255);
    EXPECT_TRUE(wait_count("qps", 0));
    EXPECT_EQ(ibv_close_xrcd(x), 0);
    for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) close(fd);
}

TEST_F(Xrc, RoutesByRemoteSrqnAndRejectsForeignDomain) {
    ibv_xrcd *xa = open_xrcd_path(ctx, path_a, O_CREAT);
    ibv_xrcd *xb = open_xrcd_path(ctx, path_b, O_CREAT);
    ASSERT_TRUE(xa && xb);
    std::vector<uint8_t> buf(1 << 14);
    ibv_mr *mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ibv_cq *rcq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
    ASSERT_NE(rcq, nullptr);
    auto make_srq = [&](ibv_xrcd *x) {
        ibv_srq_init_attr_ex sa{};
        sa.attr.max_wr = 8;
        sa.attr.max_sge = 1;
        sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
        sa.srq_type = IBV_SRQT_XRC;
        sa.xrcd = x;
        sa.cq = rcq;
        sa.pd = pd;
        return ibv_create_srq_ex(ctx, &sa);
    };
    ibv_srq *sa = make_srq(xa), *sb = make_srq(xb);
    ASSERT_TRUE(sa && sb);
    uint32_t na = 0, nb = 0;
    ASSERT_EQ(ibv_get_srq_num(sa, &na), 0);
    ASSERT_EQ(ibv_get_srq_num(sb, &nb), 0);
    EXPECT_NE(na, nb);
    ASSERT_EQ(post_srq_recv_simple(sa, mr, buf.data(), 256, 1), 0);
    ASSERT_EQ(post_srq_recv_simple(sb, mr, buf.data() + 256, 256, 2), 0);

    ibv_qp *tgt = create_tgt(ctx, xa);
    ASSERT_NE(tgt, nullptr);
    ibv_qp_init_attr_ex ia{};
    ia.qp_type = IBV_QPT_XRC_SEND;
    ia.send_cq = cq;
    ia.cap.max_send_wr = 8;
    ia.cap.max_send_sge = 1;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD;
    ia.pd = pd;
    ibv_qp *ini = ibv_create_qp_ex(ctx, &ia);
    ASSERT_NE(ini, nullptr);
    ASSERT_EQ(connect_qp(ini, tgt->qp_num), 0);
    ASSERT_EQ(connect_qp(tgt, ini->qp_num), 0);

    std::memcpy(buf.data() + 4096, "to the right SRQ", 17);
    ASSERT_EQ(post_send_simple(ini, mr, buf.data() + 4096, 17, 10, IBV_WR_SEND, 0, 0, na), 0);
    ibv_wc wc;
    ASSERT_EQ(poll_n(rcq, &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 1u);
    EXPECT_EQ(wc.qp_num, tgt->qp_num); // receive: qp_num = TGT QPN
    EXPECT_EQ(wc.src_qp, ini->qp_num); //          src_qp = INI QPN
    EXPECT_EQ(wc.byte_len, 17u);
    EXPECT_STREQ(reinterpret_cast<char *>(buf.data()), "to the right SRQ");
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.qp_num, ini->qp_num);

    // An SRQ of another XRC domain is out of reach through this TGT QP.
    ASSERT_EQ(post_send_simple(ini, mr, buf.data() + 4096, 17, 11, IBV_WR_SEND, 0, 0, nb), 0);
    ASSERT_EQ(poll_n(cq, &wc, 1), 1);
    EXPECT_EQ(wc.wr_id, 11u);
    EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR);
    EXPECT_EQ(poll_n(rcq, &wc, 1, 50), 0);
    EXPECT_EQ(buf[256], 0);

    EXPECT_EQ(ibv_destroy_qp(ini), 0);
    EXPECT_EQ(ibv_destroy_qp(tgt), 0);
    EXPECT_EQ(ibv_destroy_srq(sa), 0);
    EXPECT_EQ(ibv_destroy_srq(sb), 0);
    EXPECT_EQ(ibv_destroy_cq(rcq), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_close_xrcd(xa), 0);
    EXPECT_EQ(ibv_close_xrcd(xb), 0);
}

TEST_F(Xrc, ProcessDeathReleasesEverything) {
    std::string pa = path_a;
    int code = in_child([&](ibv_context *c) {
        ibv_pd *p = ibv_alloc_pd(c);
        static char mem[8192];
        ibv_mr *m = p ? ibv_reg_mr(p, mem, sizeof(mem), IBV_ACCESS_LOCAL_WRITE) : nullptr;
        ibv_cq *q = ibv_create_cq(c, 16, nullptr, nullptr, 0);
        ibv_qp *r1 = (p && q) ? create_rc(p, q) : nullptr;
        ibv_qp *r2 = (p && q) ? create_rc(p, q) : nullptr;
        ibv_xrcd *x = open_xrcd_path(c, pa, O_CREAT);
        ibv_qp *t = x ? create_tgt(c, x) : nullptr;
        if (!m || !r1 || !r2 || !t || connect_qp(r1, r2->qp_num) || connect_qp(r2, r1->qp_num)) return 1;
        post_recv_simple(r2, m, mem, 64, 1);
        ::raise(SIGKILL); // die with everything still allocated
        return 2;
    });
    EXPECT_EQ(code, 100 + SIGKILL);
    EXPECT_TRUE(wait_count("qps", 0));
    EXPECT_EQ(ctl_count("mrs"), 0);
    EXPECT_EQ(ctl_count("pds"), 1); // the fixture's own
    EXPECT_EQ(ctl_count("cqs"), 1);
    EXPECT_EQ(ctl_count("xrcds"), 0);
    EXPECT_EQ(ctl_count("clients"), 1);
}

} // namespace
