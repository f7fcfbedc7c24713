// SPDX-License-Identifier: BSD-3-Clause
// Object import: ibv_import_device on a copy of a context's cmd_fd (dup in this process, or SCM_RIGHTS to
// another process), ibv_import_pd / ibv_import_mr / ibv_import_dm by handle, the unimports, lifetime (the
// objects live while any copy of the cmd_fd is open) and isolation (only the owning context's objects).
// Also: huge-page memory as a registration target.
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "import_peer.hpp"
#include "simhca_fixture.hpp"

using namespace simhca::test;

namespace {

constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

class Import : public DaemonTest {
protected:
    void SetUp() override {
        DaemonTest::SetUp();
        buf.assign(1 << 16, 0);
        mr = ibv_reg_mr(pd, buf.data(), buf.size(), kAccess);
        ASSERT_NE(mr, nullptr);
    }
    void TearDown() override {
        if (ictx) ibv_close_device(ictx);
        DaemonTest::TearDown();
    }
    ibv_context *import_dup() {
        int fd = ::dup(ctx->cmd_fd);
        if (fd < 0) return nullptr;
        ibv_context *c = ibv_import_device(fd);
        if (!c) ::close(fd);
        return c;
    }
    // Imports this test's context through a dup of its cmd_fd (into `ictx`), then its PD and MR into that.
    void import_pd_and_mr(ibv_pd *&ipd, ibv_mr *&imr) {
        ictx = import_dup();
        ASSERT_NE(ictx, nullptr) << std::strerror(errno);
        ipd = ibv_import_pd(ictx, pd->handle);
        ASSERT_NE(ipd, nullptr);
        imr = ibv_import_mr(ipd, mr->handle);
        ASSERT_NE(imr, nullptr);
    }
    // A write from `src` (lkey) to `dst` (rkey) over a QP pair built on `qpd`.
    void rdma_write(ibv_context *c, ibv_pd *qpd, void *src, uint32_t lkey, void *dst, uint32_t rkey, uint32_t len) {
        ibv_cq *q = ibv_create_cq(c, 16, nullptr, nullptr, 0);
        ASSERT_NE(q, nullptr);
        ibv_qp *a = create_rc(qpd, q), *b = create_rc(qpd, q);
        ASSERT_TRUE(a && b);
        ASSERT_EQ(connect_qp(a, b->qp_num), 0);
        ASSERT_EQ(connect_qp(b, a->qp_num), 0);
        ibv_sge sge{uint64_t(src), len, lkey};
        ibv_send_wr wr{}, *bad = nullptr;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = uint64_t(dst);
        wr.wr.rdma.rkey = rkey;
        ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
        ibv_wc wc;
        ASSERT_EQ(poll_n(q, &wc, 1), 1);
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(ibv_destroy_qp(a), 0);
        EXPECT_EQ(ibv_destroy_qp(b), 0);
        EXPECT_EQ(ibv_destroy_cq(q), 0);
    }
    std::vector<uint8_t> buf;
    ibv_mr *mr = nullptr;
    ibv_context *ictx = nullptr;
};

TEST_F(Import, DupOfCmdFdSharesPdAndMrForRdma) {
    ibv_pd *ipd = nullptr;
    ibv_mr *imr = nullptr;
    ASSERT_NO_FATAL_FAILURE(import_pd_and_mr(ipd, imr));
    EXPECT_NE(ictx, ctx);
    EXPECT_EQ(ipd->handle, pd->handle);
    EXPECT_EQ(ipd->context, ictx);
    EXPECT_EQ(imr->handle, mr->handle);
    EXPECT_EQ(imr->lkey, mr->lkey);
    EXPECT_EQ(imr->rkey, mr->rkey);
    EXPECT_EQ(imr->length, mr->length);
    EXPECT_EQ(imr->addr, nullptr); // rdma-core's query does not return it
    EXPECT_EQ(imr->pd, ipd);

    // QPs of the imported context on the imported PD, keys of the imported MR.
    for (int i = 0; i < 4096; ++i) buf[i] = uint8_t(i * 5 + 3);
    rdma_write(ictx, ipd, buf.data(), imr->lkey, buf.data() + 8192, imr->rkey, 4096);
    EXPECT_EQ(std::memcmp(buf.data(), buf.data() + 8192, 4096), 0);

    // Unimport frees only our side: the daemon still has both objects, and the owner can still use them.
    ibv_unimport_mr(imr);
    ibv_unimport_pd(ipd);
    EXPECT_EQ(ctl_count("pds"), 1);
    EXPECT_EQ(ctl_count("mrs"), 1);
    std::memset(buf.data() + 8192, 0, 4096);
    rdma_write(ctx, pd, buf.data(), mr->lkey, buf.data() + 8192, mr->rkey, 4096);
    EXPECT_EQ(std::memcmp(buf.data(), buf.data() + 8192, 4096), 0);
}

TEST_F(Import, ObjectsAreDestroyedOnceByEitherContext) {
    ibv_pd *ipd = nullptr;
    ibv_mr *imr = nullptr;
    ASSERT_NO_FATAL_FAILURE(import_pd_and_mr(ipd, imr));
    // The importer destroys the MR: gone for both; the owner only frees its user-space part.
    EXPECT_EQ(ibv_dereg_mr(imr), 0);
    EXPECT_TRUE(wait_count("mrs", 0));
    errno = 0;
    EXPECT_EQ(ibv_import_mr(pd, mr->handle), nullptr);
    EXPECT_EQ(errno, ENOENT);
    ibv_unimport_mr(mr);
    mr = nullptr;
    // An object created through the imported context belongs to the same (shared) context.
    ibv_mr *m2 = ibv_reg_mr(ipd, buf.data(), 4096, kAccess);
    ASSERT_NE(m2, nullptr);
    ibv_mr *back = ibv_import_mr(pd, m2->handle);
    ASSERT_NE(back, nullptr);
    EXPECT_EQ(back->rkey, m2->rkey);
    ibv_unimport_mr(back);
    EXPECT_EQ(ibv_dereg_mr(m2), 0);
    // The owner deallocates the PD; the importer unimports its copy.
    ibv_unimport_pd(ipd);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    pd = nullptr;
    EXPECT_TRUE(wait_count("pds", 0));
}

TEST_F(Import, BadHandlesFailLikeUverbs) {
    ictx = import_dup();
    ASSERT_NE(ictx, nullptr);
    errno = 0;
    EXPECT_EQ(ibv_import_pd(ictx, 0x7fffffff), nullptr);
    EXPECT_EQ(errno, ENOENT); // no such object in this context
    ibv_pd *ipd = ibv_import_pd(ictx, pd->handle);
    ASSERT_NE(ipd, nullptr);
    errno = 0;
    EXPECT_EQ(ibv_import_mr(ipd, 0x7fffffff), nullptr);
    EXPECT_EQ(errno, ENOENT);
    errno = 0;
    EXPECT_EQ(ibv_import_mr(ipd, pd->handle), nullptr); // a handle of another object type
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(ibv_import_pd(ictx, mr->handle), nullptr);
    EXPECT_EQ(errno, EINVAL);
    errno = 0;
    EXPECT_EQ(ibv_import_dm(ictx, 0x7fffffff), nullptr);
    EXPECT_EQ(errno, ENOENT);
    ibv_unimport_pd(ipd);
}

TEST_F(Import, ImportDeviceNeedsACmdFd) {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    errno = 0;
    EXPECT_EQ(ibv_import_device(p[0]), nullptr);
    EXPECT_EQ(errno, EINVAL);
    ::close(p[0]);
    ::close(p[1]);
    int s[2]; // a socket, but not a connection to the daemon
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, s), 0);
    errno = 0;
    EXPECT_EQ(ibv_import_device(s[0]), nullptr);
    EXPECT_EQ(errno, EINVAL);
    ::close(s[0]);
    ::close(s[1]);
    errno = 0;
    EXPECT_EQ(ibv_import_device(-1), nullptr);
    EXPECT_EQ(errno, EINVAL);
}

TEST_F(Import, ObjectsOutliveTheOriginalContextUntilTheLastFdCloses) {
    ibv_pd *ipd = nullptr;
    ibv_mr *imr = nullptr;
    ASSERT_NO_FATAL_FAILURE(import_pd_and_mr(ipd, imr));
    ASSERT_EQ(ibv_close_device(ctx), 0); // leaves its pd, cq, mr to the daemon
    ctx = nullptr;
    EXPECT_EQ(ctl_count("pds"), 1);
    EXPECT_EQ(ctl_count("mrs"), 1);
    EXPECT_EQ(ctl_count("cqs"), 1);
    for (int i = 0; i < 1000; ++i) buf[i] = uint8_t(i);
    rdma_write(ictx, ipd, buf.data(), imr->lkey, buf.data() + 20000, imr->rkey, 1000);
    EXPECT_EQ(std::memcmp(buf.data(), buf.data() + 20000, 1000), 0);
    ibv_unimport_mr(imr); // user-space parts only: the daemon objects stay for the close below
    ibv_unimport_pd(ipd);
    ASSERT_EQ(ibv_close_device(ictx), 0); // the last copy of the cmd_fd: everything goes
    ictx = nullptr;
    EXPECT_TRUE(wait_count("pds", 0));
    EXPECT_EQ(ctl_count("mrs"), 0);
    EXPECT_EQ(ctl_count("cqs"), 0);
}

TEST_F(Import, OnlyTheOwningContextsObjectsAreReachable) {
    ibv_context *other = open_device(); // another client (another uverbs file)
    ASSERT_NE(other, nullptr);
    ibv_pd *opd = ibv_alloc_pd(other);
    ASSERT_NE(opd, nullptr);
    ibv_mr *omr = ibv_reg_mr(opd, buf.data(), 4096, kAccess);
    ASSERT_NE(omr, nullptr);
    ictx = import_dup();
    ASSERT_NE(ictx, nullptr);
    errno = 0;
    EXPECT_EQ(ibv_import_pd(ictx, opd->handle), nullptr);
    EXPECT_EQ(errno, ENOENT);
    ibv_pd *ipd = ibv_import_pd(ictx, pd->handle);
    ASSERT_NE(ipd, nullptr);
    errno = 0;
    EXPECT_EQ(ibv_import_mr(ipd, omr->handle), nullptr);
    EXPECT_EQ(errno, ENOENT);
    // Nor can the importer destroy them: a handle of another context is unknown here.
    ibv_pd fake = *opd;
    fake.context = ictx;
    EXPECT_NE(ibv_dealloc_pd(&fake), 0);
    EXPECT_EQ(ctl_count("pds"), 2);
    ibv_unimport_pd(ipd);
    // Importing the other context's fd reaches its objects, and not ours.
    int fd = ::dup(other->cmd_fd);
    ibv_context *io = ibv_import_device(fd);
    ASSERT_NE(io, nullptr);
    ibv_pd *iopd = ibv_import_pd(io, opd->handle);
    EXPECT_NE(iopd, nullptr);
    if (iopd) ibv_unimport_pd(iopd);
    errno = 0;
    EXPECT_EQ(ibv_import_pd(io, pd->handle), nullptr);
    EXPECT_EQ(errno, ENOENT);
    EXPECT_EQ(ibv_close_device(io), 0);
    EXPECT_EQ(ibv_dereg_mr(omr), 0);
    EXPECT_EQ(ibv_dealloc_pd(opd), 0);
    EXPECT_EQ(ibv_close_device(other), 0);
}

TEST_F(Import, DeviceMemoryIsSharedWithTheImportedContext) {
    ibv_alloc_dm_attr attr{};
    attr.length = 4096;
    ibv_dm *dm = ibv_alloc_dm(ctx, &attr);
    ASSERT_NE(dm, nullptr);
    ictx = import_dup();
    ASSERT_NE(ictx, nullptr);
    ibv_dm *idm = ibv_import_dm(ictx, dm->handle);
    ASSERT_NE(idm, nullptr) << std::strerror(errno);
    EXPECT_EQ(idm->handle, dm->handle);
    std::vector<uint8_t> in(4096), out(4096, 0);
    for (size_t i = 0; i < in.size(); ++i) in[i] = uint8_t(i ^ 0x5a);
    ASSERT_EQ(ibv_memcpy_to_dm(dm, 0, in.data(), in.size()), 0);
    ASSERT_EQ(ibv_memcpy_from_dm(out.data(), idm, 0, out.size()), 0);
    EXPECT_EQ(in, out);
    ibv_unimport_dm(idm); // the DM itself stays
    ASSERT_EQ(ibv_memcpy_from_dm(out.data(), dm, 0, 64), 0);
    EXPECT_EQ(ibv_free_dm(dm), 0);
}

// Another process receives the cmd_fd over a unix socket (simhca-import-peer), imports, and moves data
// between its own memory and ours; then our context closes and its copy keeps the objects alive.
TEST_F(Import, SecondProcessImportsOverAUnixSocket) {
    ibv_context *other = open_device();
    ASSERT_NE(other, nullptr);
    ibv_pd *opd = ibv_alloc_pd(other);
    ASSERT_NE(opd, nullptr);
    int sp[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp), 0);
    const char *prog_env = std::getenv("SIMHCA_IMPORT_PEER_PROG");
    std::string prog = prog_env && *prog_env ? prog_env : "./simhca-import-peer";
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::close(sp[0]);
        std::string arg = std::to_string(sp[1]);
        ::execl(prog.c_str(), "simhca-import-peer", arg.c_str(), (char *)nullptr);
        ::_exit(127);
    }
    ::close(sp[1]);
    std::memset(buf.data(), 0, 3 * 4096);
    PeerOffer offer{pd->handle, mr->handle, mr->lkey, mr->rkey, uint64_t(buf.data()), mr->length, opd->handle, 0};
    int fd = ctx->cmd_fd; // SCM_RIGHTS makes the peer's copy
    char ctl[CMSG_SPACE(sizeof(int))] = {};
    iovec iov{&offer, sizeof(offer)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl;
    msg.msg_controllen = sizeof(ctl);
    cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
    ASSERT_EQ(::sendmsg(sp[0], &msg, 0), ssize_t(sizeof(offer)));
    PeerResult res{-1, 0};
    ASSERT_EQ(::recv(sp[0], &res, sizeof(res), 0), ssize_t(sizeof(res)));
    EXPECT_EQ(res.step, 0) << "peer check failed: " << std::strerror(res.err);
    if (res.step == 0) {
        for (int i = 0; i < 4096; ++i) { // the peer's pattern, then its copy made with our MR's lkey
            ASSERT_EQ(buf[i], uint8_t(i * 3 + 1)) << i;
            ASSERT_EQ(buf[4096 + i], uint8_t(i * 3 + 1)) << i;
        }
        ASSERT_EQ(ibv_close_device(ctx), 0);
        ctx = nullptr;
        EXPECT_EQ(ctl_count("mrs"), 2); // ours (closed context, the peer's fd keeps it) + the peer's own
        ASSERT_EQ(::send(sp[0], "g", 1, 0), 1);
        res = {-1, 0};
        ASSERT_EQ(::recv(sp[0], &res, sizeof(res), 0), ssize_t(sizeof(res)));
        EXPECT_EQ(res.step, 0) << "peer check after close failed: " << std::strerror(res.err);
        EXPECT_EQ(buf[8192], 0x77);
        EXPECT_EQ(buf[8192 + 63], 0x77);
    }
    int st = 0;
    ASSERT_EQ(::waitpid(child, &st, 0), child);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
    ::close(sp[0]);
    // The peer's exit closed the last copy: only the other context's PD is left.
    EXPECT_TRUE(wait_count("pds", 1));
    EXPECT_EQ(ctl_count("mrs"), 0);
    EXPECT_EQ(ibv_dealloc_pd(opd), 0);
    EXPECT_EQ(ibv_close_device(other), 0);
}

// Memory from 2 MiB huge pages registers and carries RDMA (skipped without free huge pages).
TEST_F(Import, HugePageMemoryCarriesRdma) {
    constexpr size_t kHuge = 2u << 20;
    void *p = ::mmap(nullptr, kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p == MAP_FAILED) GTEST_SKIP() << "no free 2 MiB huge page: " << std::strerror(errno);
    auto *h = static_cast<uint8_t *>(p);
    ibv_mr *hm = ibv_reg_mr(pd, h, kHuge, kAccess | IBV_ACCESS_HUGETLB);
    ASSERT_NE(hm, nullptr);
    for (size_t i = 0; i < 65536; ++i) h[i] = uint8_t(i * 11);
    rdma_write(ctx, pd, h, hm->lkey, h + kHuge - 65536, hm->rkey, 65536);
    EXPECT_EQ(std::memcmp(h, h + kHuge - 65536, 65536), 0);
    EXPECT_EQ(ibv_dereg_mr(hm), 0);
    ::munmap(p, kHuge);
}

} // namespace
