// SPDX-License-Identifier: BSD-3-Clause
// conf-probe FEATURE: does the verbs library in use (ours, via LD_LIBRARY_PATH) implement FEATURE well
// enough to move data? One process, loopback between its own QPs on device simhca0, everything bounded.
// Exit 0 = yes; 1 = no, with a one-line reason on stdout (the conformance scripts print it as their SKIP
// reason). The scripts gate on this so a feature the software HCA has not landed yet SKIPs instead of
// failing, and starts being tested, with no edit, the day it works.
//
// FEATURE: device rc events srq ud rdma atomic xrc qpex cqex
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <string>
#include <unistd.h>

namespace {

[[noreturn]] void missing(const std::string &why)
{
    std::printf("%s\n", why.c_str());
    std::exit(1);
}

template <typename T>
T *need(T *p, const char *what)
{
    if (!p)
        missing(std::string(what) + " failed: " + std::strerror(errno));
    return p;
}

void need0(int rc, const char *what)
{
    if (rc)
        missing(std::string(what) + " failed: " + std::strerror(rc > 0 ? rc : errno));
}

constexpr int kMsg = 64;
constexpr uint32_t kQkey = 0x11111111;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;

struct Device {
    ibv_context *ctx = nullptr;
    ibv_pd *pd = nullptr;
    ibv_cq *cq = nullptr;
    ibv_port_attr port{};
    alignas(64) char buf[4 * 4096];
    ibv_mr *mr = nullptr;
};

Device open_device()
{
    Device d;
    int n = 0;
    ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0)
        missing("no verbs device (ibv_get_device_list gave none)");
    ibv_device *dev = nullptr;
    for (int i = 0; i < n; ++i)
        if (std::strcmp(ibv_get_device_name(list[i]), "simhca0") == 0)
            dev = list[i];
    if (!dev)
        missing("device simhca0 not listed");
    d.ctx = need(ibv_open_device(dev), "ibv_open_device");
    ibv_free_device_list(list);
    need0(ibv_query_port(d.ctx, 1, &d.port), "ibv_query_port");
    d.pd = need(ibv_alloc_pd(d.ctx), "ibv_alloc_pd");
    d.cq = need(ibv_create_cq(d.ctx, 64, nullptr, nullptr, 0), "ibv_create_cq");
    std::memset(d.buf, 0, sizeof d.buf);
    d.mr = need(ibv_reg_mr(d.pd, d.buf, sizeof d.buf, kAccess), "ibv_reg_mr");
    return d;
}

// Polls CQ for one completion (5 s bound); the status must be success.
ibv_wc poll_one(ibv_cq *cq, const char *what)
{
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    ibv_wc wc{};
    while (std::chrono::steady_clock::now() < end) {
        int n = ibv_poll_cq(cq, 1, &wc);
        if (n < 0)
            missing(std::string("ibv_poll_cq failed while waiting for ") + what);
        if (n == 1) {
            if (wc.status != IBV_WC_SUCCESS)
                missing(std::string(what) + " completed with " + ibv_wc_status_str(wc.status));
            return wc;
        }
        usleep(100);
    }
    missing(std::string("no completion for ") + what + " within 5 s");
}

ibv_qp *create_qp(Device &d, ibv_qp_type type, ibv_srq *srq = nullptr)
{
    ibv_qp_init_attr attr{};
    attr.send_cq = d.cq;
    attr.recv_cq = d.cq;
    attr.srq = srq;
    attr.qp_type = type;
    attr.cap.max_send_wr = 16;
    attr.cap.max_recv_wr = srq ? 0 : 16;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    return need(ibv_create_qp(d.pd, &attr), "ibv_create_qp");
}

// RESET -> INIT -> RTR -> RTS towards (dlid, dest_qpn), with the masks the kernel demands per type.
void connect(ibv_qp *qp, ibv_qp_type type, uint16_t dlid, uint32_t dest_qpn)
{
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    if (type == IBV_QPT_UD) {
        a.qkey = kQkey;
        need0(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), "UD INIT");
        a = {};
        a.qp_state = IBV_QPS_RTR;
        need0(ibv_modify_qp(qp, &a, IBV_QP_STATE), "UD RTR");
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = 0;
        need0(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "UD RTS");
        return;
    }
    a.qp_access_flags = kAccess;
    need0(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), "INIT");
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = dlid;
    a.ah_attr.port_num = 1;
    int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (type != IBV_QPT_XRC_SEND)
        rtr |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    need0(ibv_modify_qp(qp, &a, rtr), "RTR");
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    int rts = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
    if (type != IBV_QPT_XRC_RECV)
        rts |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    need0(ibv_modify_qp(qp, &a, rts), "RTS");
}

void post_recv_buf(Device &d, ibv_qp *qp, ibv_srq *srq, size_t offset, uint32_t len)
{
    ibv_sge sge{reinterpret_cast<uintptr_t>(d.buf + offset), len, d.mr->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = 2;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    need0(srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad), "post receive");
}

// SEND kMsg bytes from buf[0] and check they arrived at buf[4096] (+40 for UD's GRH room).
void send_and_check(Device &d, ibv_qp *sender, ibv_qp *receiver, ibv_srq *srq, ibv_send_wr wr_template,
                    size_t recv_off = 4096, uint32_t recv_len = kMsg)
{
    post_recv_buf(d, receiver, srq, recv_off, recv_len);
    for (int i = 0; i < kMsg; ++i)
        d.buf[i] = static_cast<char>('a' + i % 26);
    ibv_sge sge{reinterpret_cast<uintptr_t>(d.buf), kMsg, d.mr->lkey};
    ibv_send_wr wr = wr_template, *bad = nullptr;
    wr.wr_id = 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    need0(ibv_post_send(sender, &wr, &bad), "ibv_post_send");
    for (int got = 0; got < 2; ++got)
        poll_one(d.cq, "SEND");
    size_t data = recv_off + (recv_len - kMsg);
    if (std::memcmp(d.buf, d.buf + data, kMsg) != 0)
        missing("SEND data arrived corrupted");
}

struct RcPair {
    ibv_qp *a, *b;
};

RcPair rc_pair(Device &d, ibv_srq *srq = nullptr)
{
    RcPair p{create_qp(d, IBV_QPT_RC), create_qp(d, IBV_QPT_RC, srq)};
    connect(p.a, IBV_QPT_RC, d.port.lid, p.b->qp_num);
    connect(p.b, IBV_QPT_RC, d.port.lid, p.a->qp_num);
    return p;
}

int probe(const std::string &feature)
{
    Device d = open_device();
    if (feature == "device") {
        ibv_device_attr attr{};
        need0(ibv_query_device(d.ctx, &attr), "ibv_query_device");
        if (!(attr.device_cap_flags & IBV_DEVICE_XRC))
            missing("device lacks IBV_DEVICE_XRC");
        if (d.port.state != IBV_PORT_ACTIVE)
            missing("port 1 is not ACTIVE");
        return 0;
    }
    if (feature == "rc") {
        RcPair p = rc_pair(d);
        send_and_check(d, p.a, p.b, nullptr, {});
        return 0;
    }
    if (feature == "events") {
        ibv_comp_channel *ch = need(ibv_create_comp_channel(d.ctx), "ibv_create_comp_channel");
        ibv_cq *cq = need(ibv_create_cq(d.ctx, 16, nullptr, ch, 0), "ibv_create_cq with channel");
        need0(ibv_req_notify_cq(cq, 0), "ibv_req_notify_cq");
        ibv_cq *old = d.cq;
        d.cq = cq;
        RcPair p = rc_pair(d);
        d.cq = old;
        post_recv_buf(d, p.b, nullptr, 4096, kMsg);
        ibv_sge sge{reinterpret_cast<uintptr_t>(d.buf), kMsg, d.mr->lkey};
        ibv_send_wr wr{}, *bad = nullptr;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        need0(ibv_post_send(p.a, &wr, &bad), "ibv_post_send");
        pollfd pfd{ch->fd, POLLIN, 0};
        if (poll(&pfd, 1, 5000) != 1)
            missing("completion channel fd not readable within 5 s after a completion");
        ibv_cq *ev_cq = nullptr;
        void *ev_ctx = nullptr;
        need0(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), "ibv_get_cq_event");
        if (ev_cq != cq)
            missing("ibv_get_cq_event returned another CQ");
        ibv_ack_cq_events(cq, 1);
        return 0;
    }
    if (feature == "srq") {
        ibv_srq_init_attr sa{};
        sa.attr.max_wr = 16;
        sa.attr.max_sge = 1;
        ibv_srq *srq = need(ibv_create_srq(d.pd, &sa), "ibv_create_srq");
        RcPair p = rc_pair(d, srq);
        send_and_check(d, p.a, p.b, srq, {});
        return 0;
    }
    if (feature == "ud") {
        ibv_qp *a = create_qp(d, IBV_QPT_UD), *b = create_qp(d, IBV_QPT_UD);
        connect(a, IBV_QPT_UD, 0, 0);
        connect(b, IBV_QPT_UD, 0, 0);
        ibv_ah_attr ah_attr{};
        ah_attr.dlid = d.port.lid;
        ah_attr.port_num = 1;
        ibv_ah *ah = need(ibv_create_ah(d.pd, &ah_attr), "ibv_create_ah");
        ibv_send_wr wr{};
        wr.wr.ud.ah = ah;
        wr.wr.ud.remote_qpn = b->qp_num;
        wr.wr.ud.remote_qkey = kQkey;
        send_and_check(d, a, b, nullptr, wr, 4096, kMsg + 40);
        return 0;
    }
    if (feature == "rdma" || feature == "atomic") {
        RcPair p = rc_pair(d);
        ibv_send_wr wr{}, *bad = nullptr;
        ibv_sge sge{reinterpret_cast<uintptr_t>(d.buf), 8, d.mr->lkey};
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.send_flags = IBV_SEND_SIGNALED;
        uint64_t remote = reinterpret_cast<uintptr_t>(d.buf + 8192);
        if (feature == "rdma") {
            std::memcpy(d.buf, "rdmadata", 8);
            wr.opcode = IBV_WR_RDMA_WRITE;
            wr.wr.rdma.remote_addr = remote;
            wr.wr.rdma.rkey = d.mr->rkey;
            need0(ibv_post_send(p.a, &wr, &bad), "post RDMA_WRITE");
            poll_one(d.cq, "RDMA_WRITE");
            if (std::memcmp(d.buf + 8192, "rdmadata", 8) != 0)
                missing("RDMA_WRITE data did not land");
            std::memset(d.buf, 0, 8);
            wr.opcode = IBV_WR_RDMA_READ;
            need0(ibv_post_send(p.a, &wr, &bad), "post RDMA_READ");
            poll_one(d.cq, "RDMA_READ");
            if (std::memcmp(d.buf, "rdmadata", 8) != 0)
                missing("RDMA_READ data did not come back");
            return 0;
        }
        uint64_t start = 40;
        std::memcpy(d.buf + 8192, &start, 8);
        wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
        wr.wr.atomic.remote_addr = remote;
        wr.wr.atomic.rkey = d.mr->rkey;
        wr.wr.atomic.compare_add = 2;
        need0(ibv_post_send(p.a, &wr, &bad), "post FETCH_AND_ADD");
        poll_one(d.cq, "FETCH_AND_ADD");
        uint64_t old = 0, now = 0;
        std::memcpy(&old, d.buf, 8);
        std::memcpy(&now, d.buf + 8192, 8);
        if (old != 40 || now != 42)
            missing("FETCH_AND_ADD gave wrong values");
        wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
        wr.wr.atomic.compare_add = 42;
        wr.wr.atomic.swap = 7;
        need0(ibv_post_send(p.a, &wr, &bad), "post CMP_AND_SWP");
        poll_one(d.cq, "CMP_AND_SWP");
        std::memcpy(&now, d.buf + 8192, 8);
        if (now != 7)
            missing("CMP_AND_SWP did not swap");
        return 0;
    }
    if (feature == "xrc") {
        char path[] = "/tmp/conf-probe-xrcd.XXXXXX";
        int fd = mkstemp(path);
        if (fd < 0)
            missing("mkstemp failed");
        unlink(path);
        ibv_xrcd_init_attr xa{};
        xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        xa.fd = fd;
        xa.oflags = O_CREAT;
        ibv_xrcd *xrcd = need(ibv_open_xrcd(d.ctx, &xa), "ibv_open_xrcd");
        ibv_srq_init_attr_ex sa{};
        sa.attr.max_wr = 16;
        sa.attr.max_sge = 1;
        sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
                       IBV_SRQ_INIT_ATTR_PD;
        sa.srq_type = IBV_SRQT_XRC;
        sa.xrcd = xrcd;
        sa.cq = d.cq;
        sa.pd = d.pd;
        ibv_srq *srq = need(ibv_create_srq_ex(d.ctx, &sa), "ibv_create_srq_ex(XRC)");
        uint32_t srqn = 0;
        need0(ibv_get_srq_num(srq, &srqn), "ibv_get_srq_num");
        ibv_qp_init_attr_ex ini_attr{};
        ini_attr.qp_type = IBV_QPT_XRC_SEND;
        ini_attr.send_cq = d.cq;
        ini_attr.cap.max_send_wr = 16;
        ini_attr.cap.max_send_sge = 1;
        ini_attr.comp_mask = IBV_QP_INIT_ATTR_PD;
        ini_attr.pd = d.pd;
        ibv_qp *ini = need(ibv_create_qp_ex(d.ctx, &ini_attr), "ibv_create_qp_ex(XRC_SEND)");
        ibv_qp_init_attr_ex tgt_attr{};
        tgt_attr.qp_type = IBV_QPT_XRC_RECV;
        tgt_attr.comp_mask = IBV_QP_INIT_ATTR_XRCD;
        tgt_attr.xrcd = xrcd;
        ibv_qp *tgt = need(ibv_create_qp_ex(d.ctx, &tgt_attr), "ibv_create_qp_ex(XRC_RECV)");
        connect(ini, IBV_QPT_XRC_SEND, d.port.lid, tgt->qp_num);
        connect(tgt, IBV_QPT_XRC_RECV, d.port.lid, ini->qp_num);
        ibv_send_wr wr{};
        wr.qp_type.xrc.remote_srqn = srqn;
        send_and_check(d, ini, nullptr, srq, wr);
        close(fd);
        return 0;
    }
    if (feature == "qpex") {
        ibv_qp_init_attr_ex qa{};
        qa.qp_type = IBV_QPT_RC;
        qa.send_cq = d.cq;
        qa.recv_cq = d.cq;
        qa.cap.max_send_wr = 16;
        qa.cap.max_recv_wr = 16;
        qa.cap.max_send_sge = 1;
        qa.cap.max_recv_sge = 1;
        qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        qa.pd = d.pd;
        qa.send_ops_flags = IBV_QP_EX_WITH_SEND;
        ibv_qp *a = need(ibv_create_qp_ex(d.ctx, &qa), "ibv_create_qp_ex(send_ops_flags)");
        ibv_qp_ex *qpx = need(ibv_qp_to_qp_ex(a), "ibv_qp_to_qp_ex");
        ibv_qp *b = create_qp(d, IBV_QPT_RC);
        connect(a, IBV_QPT_RC, d.port.lid, b->qp_num);
        connect(b, IBV_QPT_RC, d.port.lid, a->qp_num);
        post_recv_buf(d, b, nullptr, 4096, kMsg);
        std::memcpy(d.buf, "qpexsend", 8);
        ibv_wr_start(qpx);
        qpx->wr_id = 1;
        qpx->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_send(qpx);
        ibv_wr_set_sge(qpx, d.mr->lkey, reinterpret_cast<uintptr_t>(d.buf), kMsg);
        need0(ibv_wr_complete(qpx), "ibv_wr_complete");
        poll_one(d.cq, "ibv_wr_send");
        poll_one(d.cq, "receive of ibv_wr_send");
        if (std::memcmp(d.buf + 4096, "qpexsend", 8) != 0)
            missing("ibv_wr_send data did not arrive");
        return 0;
    }
    if (feature == "cqex") {
        ibv_cq_init_attr_ex ca{};
        ca.cqe = 16;
        ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
        ibv_cq_ex *cqx = need(ibv_create_cq_ex(d.ctx, &ca), "ibv_create_cq_ex");
        ibv_cq *old = d.cq;
        d.cq = ibv_cq_ex_to_cq(cqx);
        RcPair p = rc_pair(d);
        d.cq = old;
        post_recv_buf(d, p.b, nullptr, 4096, kMsg);
        ibv_sge sge{reinterpret_cast<uintptr_t>(d.buf), kMsg, d.mr->lkey};
        ibv_send_wr wr{}, *bad = nullptr;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        need0(ibv_post_send(p.a, &wr, &bad), "ibv_post_send");
        int seen = 0;
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        ibv_poll_cq_attr pa{};
        while (seen < 2 && std::chrono::steady_clock::now() < end) {
            int rc = ibv_start_poll(cqx, &pa);
            if (rc == ENOENT) {
                usleep(100);
                continue;
            }
            need0(rc, "ibv_start_poll");
            do {
                if (cqx->status != IBV_WC_SUCCESS)
                    missing("extended CQ completion not successful");
                ++seen;
            } while (ibv_next_poll(cqx) == 0);
            ibv_end_poll(cqx);
        }
        if (seen < 2)
            missing("extended CQ did not deliver both completions within 5 s");
        return 0;
    }
    missing("unknown feature " + feature);
}

} // namespace

int main(int argc, char **argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: conf-probe device|rc|events|srq|ud|rdma|atomic|xrc|qpex|cqex\n");
        return 2;
    }
    return probe(argv[1]);
}
