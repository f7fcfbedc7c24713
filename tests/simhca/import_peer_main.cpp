// SPDX-License-Identifier: BSD-3-Clause
// The second process of test_import.cpp's cross-process case: receives a context's cmd_fd over a unix
// socket (SCM_RIGHTS), imports the device, the PD and the MR, and moves data with them; then, after the
// first process closed its own context, checks that the shared objects are still usable.
// usage: simhca-import-peer SOCKFD   (SOCKFD: its end of a SOCK_SEQPACKET socketpair)
// Every reply is a PeerResult; `step` names the first check that failed (0 = all passed).
#include <infiniband/verbs.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "import_peer.hpp"

namespace {

using simhca::test::PeerOffer;
using simhca::test::PeerResult;

int recv_offer(int sock, PeerOffer &offer, int &fd) {
    char ctl[CMSG_SPACE(sizeof(int))];
    iovec iov{&offer, sizeof(offer)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl;
    msg.msg_controllen = sizeof(ctl);
    if (::recvmsg(sock, &msg, 0) != ssize_t(sizeof(offer))) return -1;
    cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
    std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
    return 0;
}

bool wait_one(ibv_cq *cq) {
    ibv_wc wc;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < end) {
        int n = ibv_poll_cq(cq, 1, &wc);
        if (n < 0) return false;
        if (n == 1) return wc.status == IBV_WC_SUCCESS;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return false;
}

bool rdma(ibv_qp *qp, ibv_cq *cq, ibv_wr_opcode op, uint64_t laddr, uint32_t len, uint32_t lkey, uint64_t raddr,
          uint32_t rkey) {
    ibv_sge sge{laddr, len, lkey};
    ibv_send_wr wr{};
    ibv_send_wr *bad = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return ibv_post_send(qp, &wr, &bad) == 0 && wait_one(cq);
}

int connect_rc(ibv_qp *qp, uint32_t remote_qpn, uint16_t lid) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = remote_qpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.ah_attr.dlid = lid;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return -1;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_MAX_QP_RD_ATOMIC);
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int sock = std::atoi(argv[1]);
    PeerOffer offer{};
    int cmd_fd = -1;
    PeerResult res{};
    auto reply = [&](int step) {
        res.step = step;
        res.err = step ? errno : 0;
        return ::send(sock, &res, sizeof(res), 0) == ssize_t(sizeof(res)) ? step : 3;
    };
    if (recv_offer(sock, offer, cmd_fd)) return 2;

    ibv_context *ctx = ibv_import_device(cmd_fd);
    if (!ctx) return reply(1);
    ibv_pd *pd = ibv_import_pd(ctx, offer.pd_handle);
    if (!pd) return reply(2);
    ibv_mr *mr = ibv_import_mr(pd, offer.mr_handle);
    if (!mr) return reply(3);
    if (mr->lkey != offer.lkey || mr->rkey != offer.rkey || mr->length != offer.length || mr->addr) return reply(4);
    // Another client's PD is not reachable through this context.
    errno = 0;
    if (ibv_import_pd(ctx, offer.foreign_pd_handle) || errno != ENOENT) return reply(5);

    ibv_port_attr port{};
    if (ibv_query_port(ctx, 1, &port)) return reply(6);
    ibv_cq *cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap = {4, 4, 1, 1, 0};
    ibv_qp *a = cq ? ibv_create_qp(pd, &qa) : nullptr;
    ibv_qp *b = cq ? ibv_create_qp(pd, &qa) : nullptr;
    if (!a || !b || connect_rc(a, b->qp_num, port.lid) || connect_rc(b, a->qp_num, port.lid)) return reply(7);

    // Our own memory, registered through the imported PD: the daemon reads it from this process.
    std::vector<uint8_t> mine(8192);
    for (size_t i = 0; i < 4096; ++i) mine[i] = uint8_t(i * 3 + 1);
    ibv_mr *own = ibv_reg_mr(pd, mine.data(), mine.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!own) return reply(8);
    // ours -> first process's MR at [0, 4096) (its rkey)
    if (!rdma(a, cq, IBV_WR_RDMA_WRITE, uint64_t(mine.data()), 4096, own->lkey, offer.addr, mr->rkey))
        return reply(9);
    // first process's [0, 4096) -> its [4096, 8192), with the imported MR's lkey as the source
    if (!rdma(a, cq, IBV_WR_RDMA_WRITE, offer.addr, 4096, mr->lkey, offer.addr + 4096, mr->rkey)) return reply(10);
    // read back its [4096, 8192) into ours [4096, 8192)
    if (!rdma(a, cq, IBV_WR_RDMA_READ, uint64_t(mine.data() + 4096), 4096, own->lkey, offer.addr + 4096, mr->rkey))
        return reply(11);
    if (std::memcmp(mine.data(), mine.data() + 4096, 4096) != 0) return reply(12);
    if (reply(0)) return 1;

    // The first process closes its context; our copy of the cmd_fd keeps every object alive.
    char go;
    if (::recv(sock, &go, 1, 0) != 1) return 2;
    ibv_mr *late = ibv_reg_mr(pd, mine.data(), 4096, IBV_ACCESS_LOCAL_WRITE);
    if (!late) return reply(20);
    std::memset(mine.data(), 0x77, 64);
    if (!rdma(a, cq, IBV_WR_RDMA_WRITE, uint64_t(mine.data()), 64, late->lkey, offer.addr + 8192, mr->rkey))
        return reply(21);
    if (ibv_dereg_mr(late)) return reply(22);
    ibv_unimport_mr(mr);
    ibv_unimport_pd(pd);
    if (reply(0)) return 1;
    // Exit without cleaning up: the daemon releases everything once the last cmd_fd copy is closed.
    return 0;
}
