// SPDX-License-Identifier: BSD-3-Clause
// The software HCA's librdmacm (src/simhca/rdmacm): connection establishment with private data, reject,
// unreachable ports, UD service lookup (SIDR), multicast over the CM's group mapping, the sync endpoint
// API, ids destroyed with events pending, and bad input. Each case runs in a forked child: the CM keeps
// the device it opened for the life of the process (as librdmacm does), and every test has its own daemon.
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <poll.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "../../src/simhca/rdmacm/cm_abi.hpp"
#include "simhca_fixture.hpp"

extern "C" int rsocket(int domain, int type, int protocol);

using namespace simhca::test;

namespace {

class CmTest : public DaemonTest {
protected:
    // Runs `body` in a child process (fresh librdmacm state, this test's daemon); fails if it did.
    void in_child(const std::function<void()> &body)
    {
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            body();
            _exit(::testing::Test::HasFailure() ? 1 : 0);
        }
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status)) << "child died by signal " << WTERMSIG(status);
        EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's checks failed (see above)";
    }
};

sockaddr_in ip4(const char *ip, uint16_t port = 0)
{
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

// The next event on `ch` within `ms` (the channel's fd must become readable: it is pollable), or null.
rdma_cm_event *next_event(rdma_event_channel *ch, int ms = 3000)
{
    pollfd p{ch->fd, POLLIN, 0};
    if (poll(&p, 1, ms) != 1)
        return nullptr;
    rdma_cm_event *ev = nullptr;
    return rdma_get_cm_event(ch, &ev) == 0 ? ev : nullptr;
}

// Expects the next event to be `type` and returns it (not acked), or null after a test failure.
rdma_cm_event *expect_event(rdma_event_channel *ch, rdma_cm_event_type type)
{
    rdma_cm_event *ev = next_event(ch);
    EXPECT_NE(ev, nullptr) << "no event, expected " << rdma_event_str(type);
    if (ev && ev->event != type) {
        ADD_FAILURE() << "got " << rdma_event_str(ev->event) << " (status " << ev->status << "), expected "
                      << rdma_event_str(type);
        rdma_ack_cm_event(ev);
        return nullptr;
    }
    return ev;
}

void ack_expected(rdma_event_channel *ch, rdma_cm_event_type type)
{
    if (rdma_cm_event *ev = expect_event(ch, type))
        rdma_ack_cm_event(ev);
}

// A listener on 127.0.0.1 (port chosen by the kernel) and an active id resolved towards it.
struct Pair {
    rdma_event_channel *ch = nullptr;
    rdma_cm_id *listener = nullptr, *client = nullptr;
    uint16_t port = 0;
};

// Resolves `id` (on `ch`) towards `dst`: address, then route, each event checked and acked.
void resolve_towards(rdma_event_channel *ch, rdma_cm_id *id, sockaddr_in dst)
{
    ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr *>(&dst), 1000), 0);
    ack_expected(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
    ASSERT_EQ(rdma_resolve_route(id, 1000), 0);
    ack_expected(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
}

void make_pair(Pair &p, rdma_port_space ps)
{
    p.ch = rdma_create_event_channel();
    ASSERT_NE(p.ch, nullptr);
    ASSERT_EQ(rdma_create_id(p.ch, &p.listener, nullptr, ps), 0);
    sockaddr_in a = ip4("127.0.0.1");
    ASSERT_EQ(rdma_bind_addr(p.listener, reinterpret_cast<sockaddr *>(&a)), 0);
    ASSERT_NE(p.listener->verbs, nullptr);
    ASSERT_NE(p.listener->pd, nullptr);
    ASSERT_EQ(rdma_listen(p.listener, 4), 0);
    p.port = ntohs(rdma_get_src_port(p.listener));
    ASSERT_NE(p.port, 0);
    ASSERT_EQ(rdma_create_id(p.ch, &p.client, nullptr, ps), 0);
    resolve_towards(p.ch, p.client, ip4("127.0.0.1", p.port));
    EXPECT_EQ(p.client->route.num_paths, 1);
    EXPECT_EQ(ntohs(rdma_get_dst_port(p.client)), p.port);
}

ibv_qp_init_attr qp_attr(ibv_qp_type type)
{
    ibv_qp_init_attr a{};
    a.qp_type = type;
    a.cap.max_send_wr = a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    return a;
}

// A new id of port space `ps` on `ch`, resolved towards `dst`, with a QP of the space's type, connected:
// returns the first event the connect produced (null after a test failure); the id is left in *out.
rdma_cm_event *connect_new_id(rdma_event_channel *ch, rdma_cm_id **out, rdma_port_space ps, sockaddr_in dst)
{
    rdma_cm_id *id = nullptr;
    EXPECT_EQ(rdma_create_id(ch, &id, nullptr, ps), 0);
    *out = id;
    if (!id)
        return nullptr;
    resolve_towards(ch, id, dst);
    if (::testing::Test::HasFailure())
        return nullptr;
    ibv_qp_init_attr qa = qp_attr(ps == RDMA_PS_TCP ? IBV_QPT_RC : IBV_QPT_UD);
    EXPECT_EQ(rdma_create_qp(id, nullptr, &qa), 0);
    EXPECT_EQ(rdma_connect(id, nullptr), 0);
    rdma_cm_event *ev = next_event(ch);
    EXPECT_NE(ev, nullptr) << "no answer to the connect";
    return ev;
}

// The client of `p` gets a QP of `type` and connects: returns the listener's new id from the
// CONNECT_REQUEST (the event acked), or null after a test failure.
rdma_cm_id *client_connects(Pair &p, ibv_qp_type type)
{
    ibv_qp_init_attr ca = qp_attr(type);
    EXPECT_EQ(rdma_create_qp(p.client, nullptr, &ca), 0);
    EXPECT_EQ(rdma_connect(p.client, nullptr), 0);
    rdma_cm_event *req = expect_event(p.ch, RDMA_CM_EVENT_CONNECT_REQUEST);
    if (!req)
        return nullptr;
    EXPECT_EQ(req->listen_id, p.listener);
    rdma_cm_id *child = req->id;
    rdma_ack_cm_event(req);
    return child;
}

bool wait_wc(ibv_cq *cq, ibv_wc &wc, int ms = 3000)
{
    for (int i = 0; i < ms * 10; ++i) {
        int n = ibv_poll_cq(cq, 1, &wc);
        if (n == 1)
            return true;
        if (n < 0)
            return false;
        usleep(100);
    }
    return false;
}

TEST_F(CmTest, RcConnectAcceptWithPrivateDataTrafficAndDisconnect)
{
    in_child([] {
        Pair p;
        make_pair(p, RDMA_PS_TCP);
        ibv_qp_init_attr ca = qp_attr(IBV_QPT_RC);
        ASSERT_EQ(rdma_create_qp(p.client, nullptr, &ca), 0);
        ASSERT_NE(p.client->send_cq, nullptr); // the CM made the CQs (with completion channels)
        ASSERT_NE(p.client->send_cq_channel, nullptr);
        uint8_t timeout = 17;
        ASSERT_EQ(rdma_set_option(p.client, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, 1), 0);
        const char hello[] = "hello from the client";
        rdma_conn_param cp{};
        cp.private_data = hello;
        cp.private_data_len = sizeof(hello);
        cp.responder_resources = cp.initiator_depth = 1;
        cp.retry_count = cp.rnr_retry_count = 7;
        ASSERT_EQ(rdma_connect(p.client, &cp), 0);

        rdma_cm_event *req = expect_event(p.ch, RDMA_CM_EVENT_CONNECT_REQUEST);
        ASSERT_NE(req, nullptr);
        EXPECT_EQ(req->listen_id, p.listener);
        EXPECT_EQ(req->param.conn.private_data_len, 56); // IB CM REQ private data, zero-padded
        EXPECT_EQ(memcmp(req->param.conn.private_data, hello, sizeof(hello)), 0);
        EXPECT_EQ(req->param.conn.qp_num, p.client->qp->qp_num);
        rdma_cm_id *child = req->id;
        ibv_qp_init_attr sa = qp_attr(IBV_QPT_RC);
        ASSERT_EQ(rdma_create_qp(child, nullptr, &sa), 0);
        const char welcome[] = "welcome";
        rdma_conn_param ap{};
        ap.private_data = welcome;
        ap.private_data_len = sizeof(welcome);
        ap.responder_resources = ap.initiator_depth = 1;
        ap.rnr_retry_count = 7;
        ASSERT_EQ(rdma_accept(child, &ap), 0);
        rdma_ack_cm_event(req);

        rdma_cm_event *est = next_event(p.ch);
        rdma_cm_event *est2 = next_event(p.ch);
        ASSERT_NE(est, nullptr);
        ASSERT_NE(est2, nullptr);
        // Both sides report ESTABLISHED; the active side's carries the REP's private data.
        rdma_cm_event *active = est->id == p.client ? est : est2;
        rdma_cm_event *passive = est->id == p.client ? est2 : est;
        EXPECT_EQ(active->event, RDMA_CM_EVENT_ESTABLISHED);
        EXPECT_EQ(passive->event, RDMA_CM_EVENT_ESTABLISHED);
        EXPECT_EQ(passive->id, child);
        EXPECT_EQ(active->param.conn.private_data_len, 196);
        EXPECT_EQ(memcmp(active->param.conn.private_data, welcome, sizeof(welcome)), 0);
        rdma_ack_cm_event(est);
        rdma_ack_cm_event(est2);

        ibv_qp_attr qa{};
        ibv_qp_init_attr qi{};
        ASSERT_EQ(ibv_query_qp(p.client->qp, &qa, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_DEST_QPN, &qi), 0);
        EXPECT_EQ(qa.qp_state, IBV_QPS_RTS);
        EXPECT_EQ(qa.timeout, 17);
        EXPECT_EQ(qa.dest_qp_num, child->qp->qp_num);

        // Traffic over the connected QPs.
        char sbuf[64] = "payload over the CM's connection", rbuf[64] = {};
        ibv_mr *smr = ibv_reg_mr(p.client->pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
        ibv_mr *rmr = ibv_reg_mr(child->pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
        ASSERT_TRUE(smr && rmr);
        ASSERT_EQ(post_recv_simple(child->qp, rmr, rbuf, sizeof(rbuf), 1), 0);
        ASSERT_EQ(post_send_simple(p.client->qp, smr, sbuf, sizeof(sbuf), 2), 0);
        ibv_wc wc{};
        ASSERT_TRUE(wait_wc(child->recv_cq, wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_STREQ(rbuf, sbuf);
        ASSERT_TRUE(wait_wc(p.client->send_cq, wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);

        // Disconnect: the peer gets DISCONNECTED, and so does the side that disconnected.
        ASSERT_EQ(rdma_disconnect(p.client), 0);
        rdma_cm_event *d1 = next_event(p.ch), *d2 = next_event(p.ch);
        ASSERT_TRUE(d1 && d2);
        EXPECT_EQ(d1->event, RDMA_CM_EVENT_DISCONNECTED);
        EXPECT_EQ(d2->event, RDMA_CM_EVENT_DISCONNECTED);
        EXPECT_NE(d1->id, d2->id);
        rdma_ack_cm_event(d1);
        rdma_ack_cm_event(d2);
        EXPECT_EQ(rdma_disconnect(child), 0); // answering the peer's disconnect
        ASSERT_EQ(ibv_query_qp(child->qp, &qa, IBV_QP_STATE, &qi), 0);
        EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);

        ibv_dereg_mr(smr);
        ibv_dereg_mr(rmr);
        rdma_destroy_qp(child);
        rdma_destroy_qp(p.client);
        EXPECT_EQ(rdma_destroy_id(child), 0);
        EXPECT_EQ(rdma_destroy_id(p.client), 0);
        EXPECT_EQ(rdma_destroy_id(p.listener), 0);
        rdma_destroy_event_channel(p.ch);
    });
}

// perftest destroys its QPs with ibv_destroy_qp, not rdma_destroy_qp, while its peer may still be leaving.
// The peer's disconnect then reaches an id whose QP is gone: the CM reports DISCONNECTED and leaves the QP
// alone (the kernel's CM does not move a user QP on a DREQ). Touching it was a use after free, which crashed
// ib_read_lat -R about once in 40 runs; the ASan build reports it every time.
TEST_F(CmTest, PeerDisconnectAfterTheQpWasDestroyedWithVerbs)
{
    in_child([] {
        Pair p;
        make_pair(p, RDMA_PS_TCP);
        rdma_cm_id *child = client_connects(p, IBV_QPT_RC);
        ASSERT_NE(child, nullptr);
        ibv_qp_init_attr sa = qp_attr(IBV_QPT_RC);
        ASSERT_EQ(rdma_create_qp(child, nullptr, &sa), 0);
        ASSERT_EQ(rdma_accept(child, nullptr), 0);
        ack_expected(p.ch, RDMA_CM_EVENT_ESTABLISHED);
        ack_expected(p.ch, RDMA_CM_EVENT_ESTABLISHED);

        ibv_cq *scq = child->send_cq, *rcq = child->recv_cq;
        ASSERT_EQ(ibv_destroy_qp(child->qp), 0); // child->qp now dangles, as in perftest
        ASSERT_EQ(rdma_disconnect(p.client), 0);
        rdma_cm_event *d1 = next_event(p.ch), *d2 = next_event(p.ch);
        ASSERT_TRUE(d1 && d2);
        EXPECT_EQ(d1->event, RDMA_CM_EVENT_DISCONNECTED);
        EXPECT_EQ(d2->event, RDMA_CM_EVENT_DISCONNECTED);
        rdma_ack_cm_event(d1);
        rdma_ack_cm_event(d2);
        child->qp = nullptr;
        EXPECT_EQ(rdma_destroy_id(child), 0);
        EXPECT_EQ(ibv_destroy_cq(scq), 0);
        if (rcq != scq) {
            EXPECT_EQ(ibv_destroy_cq(rcq), 0);
        }
        rdma_destroy_qp(p.client);
        EXPECT_EQ(rdma_destroy_id(p.client), 0);
        EXPECT_EQ(rdma_destroy_id(p.listener), 0);
        rdma_destroy_event_channel(p.ch);
    });
}

TEST_F(CmTest, RejectDeliversPrivateDataAndConsumerReason)
{
    in_child([] {
        Pair p;
        make_pair(p, RDMA_PS_TCP);
        rdma_cm_id *child = client_connects(p, IBV_QPT_RC);
        ASSERT_NE(child, nullptr);
        const char no[] = "connection rejected";
        ASSERT_EQ(rdma_reject(child, no, sizeof(no)), 0);
        rdma_cm_event *rej = expect_event(p.ch, RDMA_CM_EVENT_REJECTED);
        ASSERT_NE(rej, nullptr);
        EXPECT_EQ(rej->id, p.client);
        EXPECT_EQ(rej->status, 28); // IB_CM_REJ_CONSUMER_DEFINED
        EXPECT_EQ(rej->param.conn.private_data_len, 148);
        EXPECT_EQ(memcmp(rej->param.conn.private_data, no, sizeof(no)), 0);
        rdma_ack_cm_event(rej);
        EXPECT_EQ(rdma_accept(child, nullptr), -1); // no longer a request
        EXPECT_EQ(errno, EINVAL);
        rdma_destroy_id(child);
        rdma_destroy_qp(p.client);
        rdma_destroy_id(p.client);
        rdma_destroy_id(p.listener);
        rdma_destroy_event_channel(p.ch);
    });
}

TEST_F(CmTest, NobodyListeningIsRejectedForRcAndUnreachableForUd)
{
    in_child([] {
        // A port that was just free: nobody listens there.
        int s = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a = ip4("127.0.0.1");
        socklen_t len = sizeof(a);
        ASSERT_EQ(bind(s, reinterpret_cast<sockaddr *>(&a), sizeof(a)), 0);
        getsockname(s, reinterpret_cast<sockaddr *>(&a), &len);
        close(s);
        rdma_event_channel *ch = rdma_create_event_channel();
        for (rdma_port_space ps : {RDMA_PS_TCP, RDMA_PS_UDP}) {
            rdma_cm_id *id = nullptr;
            rdma_cm_event *ev = connect_new_id(ch, &id, ps, a);
            ASSERT_NE(ev, nullptr);
            EXPECT_EQ(ev->event, ps == RDMA_PS_TCP ? RDMA_CM_EVENT_REJECTED : RDMA_CM_EVENT_UNREACHABLE);
            EXPECT_NE(ev->status, 0);
            rdma_ack_cm_event(ev);
            rdma_destroy_qp(id);
            EXPECT_EQ(rdma_destroy_id(id), 0);
        }
        rdma_destroy_event_channel(ch);
    });
}

// The IB CM's service ID is the port space and the port: a listener on TCP port P does not answer a UD
// lookup of port P, nor a UDP listener an RC request (perftest -R listens on the same port number in both
// spaces, one after the other). The listener takes no request and still accepts its own kind afterwards.
TEST_F(CmTest, ListenersAnswerOnlyTheirOwnPortSpace)
{
    in_child([] {
        for (rdma_port_space lps : {RDMA_PS_TCP, RDMA_PS_UDP}) {
            rdma_port_space other = lps == RDMA_PS_TCP ? RDMA_PS_UDP : RDMA_PS_TCP;
            Pair p;
            make_pair(p, lps);
            rdma_event_channel *ch = rdma_create_event_channel();
            rdma_cm_id *id = nullptr;
            rdma_cm_event *ev = connect_new_id(ch, &id, other, ip4("127.0.0.1", p.port));
            ASSERT_NE(ev, nullptr);
            if (other == RDMA_PS_TCP) {
                EXPECT_EQ(ev->event, RDMA_CM_EVENT_REJECTED) << rdma_event_str(ev->event);
                EXPECT_EQ(ev->status, 8); // IB_CM_REJ_INVALID_SERVICE_ID
            } else {
                EXPECT_EQ(ev->event, RDMA_CM_EVENT_UNREACHABLE) << rdma_event_str(ev->event);
                EXPECT_EQ(ev->status, 1); // IB_SIDR_UNSUPPORTED
            }
            rdma_ack_cm_event(ev);
            EXPECT_EQ(next_event(p.ch, 100), nullptr) << "the listener reported the foreign request";
            rdma_destroy_qp(id);
            EXPECT_EQ(rdma_destroy_id(id), 0);
            rdma_destroy_event_channel(ch);

            // Its own kind still gets through.
            rdma_cm_id *child = client_connects(p, lps == RDMA_PS_TCP ? IBV_QPT_RC : IBV_QPT_UD);
            ASSERT_NE(child, nullptr);
            EXPECT_EQ(rdma_reject(child, nullptr, 0), 0);
            rdma_cm_event *r = next_event(p.ch);
            ASSERT_NE(r, nullptr);
            EXPECT_EQ(r->event, lps == RDMA_PS_TCP ? RDMA_CM_EVENT_REJECTED : RDMA_CM_EVENT_UNREACHABLE);
            rdma_ack_cm_event(r);
            rdma_destroy_id(child);
            rdma_destroy_qp(p.client);
            rdma_destroy_id(p.client);
            rdma_destroy_id(p.listener);
            rdma_destroy_event_channel(p.ch);
        }
    });
}

TEST_F(CmTest, UdServiceLookupGivesRemoteQpQkeyAndAddressHandle)
{
    in_child([] {
        Pair p;
        make_pair(p, RDMA_PS_UDP);
        ibv_qp_init_attr ca = qp_attr(IBV_QPT_UD);
        ASSERT_EQ(rdma_create_qp(p.client, nullptr, &ca), 0);
        ibv_qp_attr qa{};
        ibv_qp_init_attr qi{};
        ASSERT_EQ(ibv_query_qp(p.client->qp, &qa, IBV_QP_STATE | IBV_QP_QKEY, &qi), 0);
        EXPECT_EQ(qa.qp_state, IBV_QPS_RTS); // unconnected QPs are ready at once
        EXPECT_EQ(qa.qkey, RDMA_UDP_QKEY);
        ASSERT_EQ(rdma_connect(p.client, nullptr), 0);
        rdma_cm_event *req = expect_event(p.ch, RDMA_CM_EVENT_CONNECT_REQUEST);
        ASSERT_NE(req, nullptr);
        rdma_cm_id *child = req->id;
        ibv_qp_init_attr sa = qp_attr(IBV_QPT_UD);
        ASSERT_EQ(rdma_create_qp(child, nullptr, &sa), 0);
        ASSERT_EQ(rdma_accept(child, nullptr), 0);
        rdma_ack_cm_event(req);
        rdma_cm_event *est = expect_event(p.ch, RDMA_CM_EVENT_ESTABLISHED);
        ASSERT_NE(est, nullptr);
        EXPECT_EQ(est->id, p.client);
        EXPECT_EQ(est->param.ud.qp_num, child->qp->qp_num);
        EXPECT_EQ(est->param.ud.qkey, RDMA_UDP_QKEY);
        ibv_ah *ah = ibv_create_ah(p.client->pd, &est->param.ud.ah_attr);
        ASSERT_NE(ah, nullptr);
        uint32_t rqpn = est->param.ud.qp_num, qkey = est->param.ud.qkey;
        rdma_ack_cm_event(est);

        char sbuf[32] = "datagram", rbuf[40 + 32] = {};
        ibv_mr *smr = ibv_reg_mr(p.client->pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
        ibv_mr *rmr = ibv_reg_mr(child->pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
        ASSERT_EQ(post_recv_simple(child->qp, rmr, rbuf, sizeof(rbuf), 1), 0);
        ibv_sge sge{reinterpret_cast<uintptr_t>(sbuf), sizeof(sbuf), smr->lkey};
        ibv_send_wr wr{}, *bad = nullptr;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.ud.ah = ah;
        wr.wr.ud.remote_qpn = rqpn;
        wr.wr.ud.remote_qkey = qkey;
        ASSERT_EQ(ibv_post_send(p.client->qp, &wr, &bad), 0);
        ibv_wc wc{};
        ASSERT_TRUE(wait_wc(child->recv_cq, wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_EQ(wc.src_qp, p.client->qp->qp_num);
        EXPECT_STREQ(rbuf + 40, "datagram");
        ibv_destroy_ah(ah);
        ibv_dereg_mr(smr);
        ibv_dereg_mr(rmr);
        rdma_destroy_qp(child);
        rdma_destroy_id(child);
        rdma_destroy_qp(p.client);
        rdma_destroy_id(p.client);
        rdma_destroy_id(p.listener);
        rdma_destroy_event_channel(p.ch);
    });
}

TEST_F(CmTest, MulticastJoinDeliversToMembersUntilTheyLeave)
{
    in_child([] {
        rdma_event_channel *ch = rdma_create_event_channel();
        sockaddr_in src = ip4("127.0.0.1"), group = ip4("230.1.2.3");
        rdma_cm_id *ids[2] = {};
        for (auto &id : ids) {
            ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_UDP), 0);
            ASSERT_EQ(rdma_resolve_addr(id, reinterpret_cast<sockaddr *>(&src), reinterpret_cast<sockaddr *>(&group), 1000), 0);
            ack_expected(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
            ibv_qp_init_attr qa = qp_attr(IBV_QPT_UD);
            ASSERT_EQ(rdma_create_qp(id, nullptr, &qa), 0);
        }
        int ctx_cookie = 0;
        ASSERT_EQ(rdma_join_multicast(ids[0], reinterpret_cast<sockaddr *>(&group), &ctx_cookie), 0);
        rdma_cm_event *j = expect_event(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
        ASSERT_NE(j, nullptr);
        EXPECT_EQ(j->param.ud.private_data, &ctx_cookie); // the join's context comes back
        EXPECT_EQ(j->param.ud.qp_num, 0xFFFFFFu);
        EXPECT_EQ(j->param.ud.qkey, RDMA_UDP_QKEY);
        EXPECT_TRUE(j->param.ud.ah_attr.is_global);
        EXPECT_GE(j->param.ud.ah_attr.dlid, 0xC000);
        EXPECT_EQ(j->param.ud.ah_attr.grh.dgid.raw[0], 0xff);
        ibv_ah_attr group_ah = j->param.ud.ah_attr;
        rdma_ack_cm_event(j);
        rdma_cm_join_mc_attr_ex ex{};
        ex.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
        ex.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
        ex.addr = reinterpret_cast<sockaddr *>(&group);
        ASSERT_EQ(rdma_join_multicast_ex(ids[1], &ex, nullptr), 0);
        rdma_cm_event *j2 = expect_event(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
        ASSERT_NE(j2, nullptr);
        EXPECT_EQ(j2->param.ud.ah_attr.dlid, group_ah.dlid); // everyone derives the same group address
        rdma_ack_cm_event(j2);

        char sbuf[16] = "to the group", rbuf[40 + 16] = {};
        ibv_mr *smr = ibv_reg_mr(ids[1]->pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
        ibv_mr *rmr = ibv_reg_mr(ids[0]->pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
        ibv_ah *ah = ibv_create_ah(ids[1]->pd, &group_ah);
        ASSERT_TRUE(smr && rmr && ah);
        auto send_to_group = [&] {
            ibv_sge sge{reinterpret_cast<uintptr_t>(sbuf), sizeof(sbuf), smr->lkey};
            ibv_send_wr wr{}, *bad = nullptr;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_SEND;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.ud.ah = ah;
            wr.wr.ud.remote_qpn = 0xFFFFFF;
            wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
            ASSERT_EQ(ibv_post_send(ids[1]->qp, &wr, &bad), 0);
            ibv_wc wc{};
            ASSERT_TRUE(wait_wc(ids[1]->send_cq, wc));
            EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        };
        ASSERT_EQ(post_recv_simple(ids[0]->qp, rmr, rbuf, sizeof(rbuf), 1), 0);
        send_to_group();
        ibv_wc wc{};
        ASSERT_TRUE(wait_wc(ids[0]->recv_cq, wc));
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
        EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
        EXPECT_STREQ(rbuf + 40, "to the group");

        // After leaving, the member's QP is detached: nothing arrives any more.
        ASSERT_EQ(rdma_leave_multicast(ids[0], reinterpret_cast<sockaddr *>(&group)), 0);
        EXPECT_EQ(rdma_leave_multicast(ids[0], reinterpret_cast<sockaddr *>(&group)), -1);
        EXPECT_EQ(errno, EADDRNOTAVAIL);
        ASSERT_EQ(post_recv_simple(ids[0]->qp, rmr, rbuf, sizeof(rbuf), 2), 0);
        send_to_group();
        EXPECT_FALSE(wait_wc(ids[0]->recv_cq, wc, 300));

        ibv_destroy_ah(ah);
        ibv_dereg_mr(smr);
        ibv_dereg_mr(rmr);
        for (auto *id : ids) {
            rdma_destroy_qp(id);
            EXPECT_EQ(rdma_destroy_id(id), 0); // leaves the groups still joined
        }
        rdma_destroy_event_channel(ch);
    });
}

TEST_F(CmTest, SyncEndpointsConnectThroughGetRequest)
{
    in_child([] {
        rdma_addrinfo hints{}, *srv = nullptr;
        hints.ai_flags = RAI_PASSIVE;
        hints.ai_port_space = RDMA_PS_TCP;
        ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", "0", &hints, &srv), 0);
        ibv_qp_init_attr qa = qp_attr(IBV_QPT_RC);
        rdma_cm_id *listener = nullptr;
        ASSERT_EQ(rdma_create_ep(&listener, srv, nullptr, &qa), 0);
        rdma_freeaddrinfo(srv);
        ASSERT_EQ(rdma_listen(listener, 1), 0);
        std::string port = std::to_string(ntohs(rdma_get_src_port(listener)));
        rdma_cm_id *server_side = nullptr;
        int accept_rc = -2;
        std::thread server([&] {
            if (rdma_get_request(listener, &server_side) == 0) {
                accept_rc = server_side->qp ? rdma_accept(server_side, nullptr) : -3;
            }
        });
        rdma_addrinfo chints{}, *cli = nullptr;
        chints.ai_port_space = RDMA_PS_TCP;
        ASSERT_EQ(rdma_getaddrinfo("127.0.0.1", port.c_str(), &chints, &cli), 0);
        rdma_cm_id *client = nullptr;
        ibv_qp_init_attr ca = qp_attr(IBV_QPT_RC);
        ASSERT_EQ(rdma_create_ep(&client, cli, nullptr, &ca), 0);
        rdma_freeaddrinfo(cli);
        ASSERT_NE(client->qp, nullptr);
        EXPECT_EQ(rdma_connect(client, nullptr), 0);
        server.join();
        EXPECT_EQ(accept_rc, 0);
        ASSERT_NE(server_side, nullptr);
        ibv_qp_attr a{};
        ibv_qp_init_attr i{};
        ASSERT_EQ(ibv_query_qp(client->qp, &a, IBV_QP_STATE | IBV_QP_DEST_QPN, &i), 0);
        EXPECT_EQ(a.qp_state, IBV_QPS_RTS);
        EXPECT_EQ(a.dest_qp_num, server_side->qp->qp_num);
        EXPECT_EQ(rdma_disconnect(client), 0);
        rdma_destroy_ep(server_side);
        rdma_destroy_ep(client);
        rdma_destroy_ep(listener);
    });
}

TEST_F(CmTest, RcConnectsOverIpv6Loopback)
{
    in_child([] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *listener = nullptr, *client = nullptr;
        ASSERT_EQ(rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP), 0);
        sockaddr_in6 a{};
        a.sin6_family = AF_INET6;
        a.sin6_addr = in6addr_loopback;
        if (rdma_bind_addr(listener, reinterpret_cast<sockaddr *>(&a)) != 0) {
            rdma_destroy_id(listener);
            rdma_destroy_event_channel(ch);
            GTEST_SKIP() << "no IPv6 loopback here";
        }
        ASSERT_EQ(rdma_listen(listener, 1), 0);
        a.sin6_port = rdma_get_src_port(listener);
        ASSERT_EQ(rdma_create_id(ch, &client, nullptr, RDMA_PS_TCP), 0);
        ASSERT_EQ(rdma_resolve_addr(client, nullptr, reinterpret_cast<sockaddr *>(&a), 1000), 0);
        ack_expected(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
        EXPECT_EQ(client->route.addr.src_addr.sa_family, AF_INET6);
        ASSERT_EQ(rdma_resolve_route(client, 1000), 0);
        ack_expected(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
        ibv_qp_init_attr ca = qp_attr(IBV_QPT_RC);
        ASSERT_EQ(rdma_create_qp(client, nullptr, &ca), 0);
        ASSERT_EQ(rdma_connect(client, nullptr), 0);
        rdma_cm_event *req = expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
        ASSERT_NE(req, nullptr);
        rdma_cm_id *child = req->id;
        EXPECT_EQ(child->route.addr.dst_addr.sa_family, AF_INET6);
        ibv_qp_init_attr sa = qp_attr(IBV_QPT_RC);
        ASSERT_EQ(rdma_create_qp(child, nullptr, &sa), 0);
        ASSERT_EQ(rdma_accept(child, nullptr), 0);
        rdma_ack_cm_event(req);
        ack_expected(ch, RDMA_CM_EVENT_ESTABLISHED);
        ack_expected(ch, RDMA_CM_EVENT_ESTABLISHED);
        rdma_destroy_qp(child);
        rdma_destroy_qp(client);
        rdma_destroy_id(child); // connected: the peer hears a disconnect
        ack_expected(ch, RDMA_CM_EVENT_DISCONNECTED);
        rdma_destroy_id(client);
        rdma_destroy_id(listener);
        rdma_destroy_event_channel(ch);
    });
}

TEST_F(CmTest, DestroyingIdsDiscardsTheirPendingEvents)
{
    in_child([] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *id = nullptr;
        ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
        sockaddr_in d = ip4("127.0.0.1", 9);
        ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr *>(&d), 1000), 0);
        // ADDR_RESOLVED is queued and never retrieved: destroy must not wait for it, and it goes away.
        EXPECT_EQ(rdma_destroy_id(id), 0);
        EXPECT_EQ(next_event(ch, 100), nullptr);

        // A listener destroyed with an unretrieved request: the requester is rejected.
        rdma_event_channel *lch = rdma_create_event_channel();
        Pair p;
        make_pair(p, RDMA_PS_TCP);
        // Move the listener to its own channel, so its request waits there unread.
        ASSERT_EQ(rdma_migrate_id(p.listener, lch), 0);
        ibv_qp_init_attr ca = qp_attr(IBV_QPT_RC);
        ASSERT_EQ(rdma_create_qp(p.client, nullptr, &ca), 0);
        ASSERT_EQ(rdma_connect(p.client, nullptr), 0);
        pollfd pf{lch->fd, POLLIN, 0};
        ASSERT_EQ(poll(&pf, 1, 3000), 1); // the request is there
        EXPECT_EQ(rdma_destroy_id(p.listener), 0);
        EXPECT_EQ(poll(&pf, 1, 0), 0);    // and gone with its listener
        ack_expected(p.ch, RDMA_CM_EVENT_REJECTED);
        rdma_destroy_qp(p.client);
        rdma_destroy_id(p.client);
        rdma_destroy_event_channel(p.ch);
        rdma_destroy_event_channel(lch);
        rdma_destroy_event_channel(ch);
    });
}

// A process that exits while peers still talk to its CM (perftest's client exits as its server closes the
// connection): the detached CM thread wakes during exit(), after the static destructors ran. The CM state
// must outlive them. The child calls exit() (not _exit) while a thread keeps connecting to its listener.
// With a CM state that static destruction frees, both builds fail it (measured 6 of 6 each: SIGSEGV in the
// plain build, heap-use-after-free in the ASan build).
TEST_F(CmTest, ExitWhileTheCmThreadIsBusyIsClean)
{
    for (int round = 0; round < 5; ++round) {
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            // Registered before the CM state exists, so it runs after the state's destructor (atexit
            // order): the CM thread then has 1.2 s to meet a destroyed state while exit() is not done
            // (longer than a SYN retry, 1 s, in case the hammering thread waits on a full accept queue).
            atexit([] { usleep(1200000); });
            Pair p;
            make_pair(p, RDMA_PS_TCP);
            if (::testing::Test::HasFailure())
                _exit(1);
            uint16_t port = p.port;
            std::thread([port] {
                for (;;) {
                    int s = socket(AF_INET, SOCK_STREAM, 0);
                    // Close with a reset: thousands of closed connections must not sit in TIME_WAIT on
                    // ephemeral ports for a minute (a later test's bind to such a port would fail).
                    linger l{1, 0};
                    setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
                    sockaddr_in d = ip4("127.0.0.1", port);
                    connect(s, reinterpret_cast<sockaddr *>(&d), sizeof(d));
                    close(s);
                }
            }).detach();
            usleep(20000);
            exit(0); // runs the static destructors while the CM thread accepts and reaps connections
        }
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status)) << "round " << round << ": child died by signal " << WTERMSIG(status);
        ASSERT_EQ(WEXITSTATUS(status), 0) << "round " << round;
    }
}

TEST_F(CmTest, BadInputFailsCleanly)
{
    in_child([] {
        rdma_event_channel *ch = rdma_create_event_channel();
        rdma_cm_id *id = nullptr;
        EXPECT_EQ(rdma_create_id(ch, &id, nullptr, static_cast<rdma_port_space>(0x999)), -1);
        EXPECT_EQ(errno, EINVAL);
        ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
        EXPECT_EQ(rdma_connect(id, nullptr), -1); // no route yet
        EXPECT_EQ(errno, EINVAL);
        EXPECT_EQ(rdma_accept(id, nullptr), -1); // not a connection request
        EXPECT_EQ(errno, EINVAL);
        EXPECT_EQ(rdma_resolve_route(id, 100), -1);
        EXPECT_EQ(errno, EINVAL);
        sockaddr_in far = ip4("203.0.113.7"); // not an address of this node
        EXPECT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr *>(&far)), -1);
        EXPECT_EQ(errno, EADDRNOTAVAIL);
        uint8_t v = 1;
        EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, 77, &v, 1), -1);
        EXPECT_EQ(errno, ENOSYS);
        EXPECT_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &v, 4), -1);
        EXPECT_EQ(errno, EINVAL);
        sockaddr_in here = ip4("127.0.0.1");
        ASSERT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr *>(&here)), 0);
        EXPECT_EQ(rdma_bind_addr(id, reinterpret_cast<sockaddr *>(&here)), -1); // bound already
        rdma_cm_join_mc_attr_ex ex{};
        ex.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS; // the join flags are mandatory
        sockaddr_in group = ip4("230.9.9.9");
        ex.addr = reinterpret_cast<sockaddr *>(&group);
        EXPECT_EQ(rdma_join_multicast_ex(id, &ex, nullptr), -1);
        EXPECT_EQ(errno, EINVAL);
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_RTR;
        int mask = 0;
        EXPECT_EQ(rdma_init_qp_attr(id, &a, &mask), -1); // no peer to point the QP at
        a.qp_state = IBV_QPS_INIT;
        EXPECT_EQ(rdma_init_qp_attr(id, &a, &mask), 0);
        EXPECT_TRUE(mask & IBV_QP_ACCESS_FLAGS);
        // A second id cannot take a port that is listened on.
        ASSERT_EQ(rdma_listen(id, 1), 0);
        sockaddr_in same = ip4("127.0.0.1", ntohs(rdma_get_src_port(id)));
        rdma_cm_id *other = nullptr;
        ASSERT_EQ(rdma_create_id(ch, &other, nullptr, RDMA_PS_TCP), 0);
        EXPECT_EQ(rdma_bind_addr(other, reinterpret_cast<sockaddr *>(&same)), -1);
        EXPECT_EQ(errno, EADDRINUSE);
        EXPECT_EQ(rdma_destroy_id(other), 0);
        // Non-blocking channel: no event is EAGAIN, not a hang.
        fcntl(ch->fd, F_SETFL, O_NONBLOCK);
        rdma_cm_event *ev = nullptr;
        EXPECT_EQ(rdma_get_cm_event(ch, &ev), -1);
        EXPECT_EQ(errno, EAGAIN);
        EXPECT_STREQ(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT");
        EXPECT_EQ(rsocket(AF_INET, SOCK_STREAM, 0), -1); // rsockets are not provided
        EXPECT_EQ(errno, ENOSYS);
        EXPECT_EQ(rdma_destroy_id(id), 0);
        rdma_destroy_event_channel(ch);
    });
}

} // namespace
