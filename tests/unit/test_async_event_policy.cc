// SPDX-License-Identifier: BSD-3-Clause
// The port's health (down since, grace) and the decision for each asynchronous event of the device: what is
// held, resumed, re-queried, logged or fatal, and that the message names the QP's connection and peer.
#include "src/core/async_event_policy.h"
#include "src/core/port_health.h"

#include <gtest/gtest.h>

using namespace xrc;

TEST(PortHealth, RetryBudgetIsRetriesPlusOneTimesTheAckTimeout) {
    EXPECT_EQ(retry_budget_us(20, 7), 4096ull * (1ull << 20) * 8 / 1000);  // ~34.36 s, openib's defaults
    EXPECT_NEAR(double(retry_budget_us(20, 7)) / 1e6, 34.36, 0.01);
    EXPECT_NEAR(double(retry_budget_us(18, 7)) / 1e6, 8.59, 0.01);  // UCX's 1 s timeout
    EXPECT_EQ(retry_budget_us(12, 0), 4096ull * 4096 / 1000);
    EXPECT_EQ(retry_budget_us(0, 7), 0u);   // timeout 0: the requester never times out
    EXPECT_GT(retry_budget_us(31, 7), 0u);  // no overflow at the top of the range
}

TEST(PortHealth, DownHoldsUntilUpAndGraceExpiresOnlyWhileDown) {
    PortHealth h(2000000);
    EXPECT_FALSE(h.down());
    EXPECT_FALSE(h.on_up(10));  // up already
    EXPECT_TRUE(h.on_down(1000));
    EXPECT_FALSE(h.on_down(1500));  // a second PORT_ERR changes nothing, keeps the first time
    EXPECT_EQ(h.down_since_us(), 1000u);
    EXPECT_FALSE(h.grace_expired(2001000));
    EXPECT_TRUE(h.grace_expired(2001001));
    EXPECT_EQ(h.down_for_us(1500000), 1499000u);
    EXPECT_TRUE(h.on_up(501000));
    EXPECT_FALSE(h.grace_expired(99000000));
    EXPECT_EQ(h.longest_down_us(), 500000u);
    EXPECT_EQ(h.downs(), 1u);
    EXPECT_EQ(h.ups(), 1u);
    PortHealth forever(0);
    forever.on_down(0);
    EXPECT_FALSE(forever.grace_expired(UINT64_MAX / 2));
}

// Outages ridden through: the grace still says when a rail is given up where another carries its traffic; the
// last rail waits up to the outage limit.
TEST(PortHealth, TheOutageLimitExtendsTheHoldNotTheGrace) {
    PortHealth h(2000000, 30000000);
    EXPECT_EQ(h.grace_us(), 2000000u);
    EXPECT_EQ(h.hold_limit_us(), 30000000u);
    EXPECT_FALSE(h.outage_expired(99000000));  // up
    EXPECT_TRUE(h.on_down(1000));
    EXPECT_TRUE(h.grace_expired(2001001));
    EXPECT_FALSE(h.outage_expired(2001001));
    EXPECT_FALSE(h.outage_expired(30001000));
    EXPECT_TRUE(h.outage_expired(30001001));
    EXPECT_TRUE(h.on_up(30001002));
    EXPECT_FALSE(h.outage_expired(99000000));
    PortHealth without(2000000);  // no limit: the hold ends with the grace
    EXPECT_EQ(without.hold_limit_us(), 2000000u);
    without.on_down(0);
    EXPECT_TRUE(without.outage_expired(2000001));
    PortHealth shorter(40000000, 30000000);  // a grace longer than the limit stays
    EXPECT_EQ(shorter.hold_limit_us(), 40000000u);
    PortHealth forever(0, 30000000);  // no grace: never given up
    forever.on_down(0);
    EXPECT_EQ(forever.hold_limit_us(), 0u);
    EXPECT_FALSE(forever.outage_expired(UINT64_MAX / 2));
}

namespace {
EventDecision decide(ibv_event_type type, int port = 1, QpRole role = {}, std::uint32_t qpn = 0) {
    EventSubject s;
    s.type = type;
    s.port_num = port;
    s.qp_num = qpn;
    s.role = role;
    return decide_event(s, 1);
}
}  // namespace

TEST(AsyncEventPolicy, PortEventsHoldResumeOrRequeryOnlyTheirOwnPort) {
    EXPECT_EQ(decide(IBV_EVENT_PORT_ERR).verdict, EventVerdict::hold);
    EXPECT_EQ(decide(IBV_EVENT_PORT_ACTIVE).verdict, EventVerdict::resume);
    EXPECT_EQ(decide(IBV_EVENT_PORT_ERR, 2).verdict, EventVerdict::ignore);  // another port of the device
    EXPECT_EQ(decide(IBV_EVENT_PORT_ACTIVE, 2).verdict, EventVerdict::ignore);
    for (auto t : {IBV_EVENT_LID_CHANGE, IBV_EVENT_CLIENT_REREGISTER, IBV_EVENT_SM_CHANGE, IBV_EVENT_PKEY_CHANGE,
                   IBV_EVENT_GID_CHANGE})
        EXPECT_EQ(decide(t).verdict, EventVerdict::requery) << ibv_event_type_str(t);
}

TEST(AsyncEventPolicy, DeviceCqAndSrqErrorsAreFatal) {
    EXPECT_EQ(decide(IBV_EVENT_DEVICE_FATAL, 0).verdict, EventVerdict::lose_rail);
    EXPECT_EQ(decide(IBV_EVENT_CQ_ERR, 0).verdict, EventVerdict::fatal);
    EXPECT_EQ(decide(IBV_EVENT_SRQ_ERR, 0).verdict, EventVerdict::fatal);
    EXPECT_EQ(decide(IBV_EVENT_SRQ_LIMIT_REACHED, 0).verdict, EventVerdict::rearm_srq);
    EXPECT_EQ(decide(IBV_EVENT_COMM_EST, 0).verdict, EventVerdict::ignore);
    EXPECT_EQ(decide(IBV_EVENT_SQ_DRAINED, 0).verdict, EventVerdict::ignore);
}

// A completion queue that overran discarded completions: among them receives whose senders' HCAs were acknowledged
// (the message is lost, and no other rail knows to send it again), and sends' completions (their owners never
// hear). Failing the rail over would go on without them: the job ends, during MPI_Finalize too. A dead device
// only loses what its completions report (flushed with an error, sent again over another rail).
TEST(AsyncEventPolicy, AnOverrunCompletionQueueEndsTheJobEvenWithOtherRails) {
    const EventDecision cq = decide(IBV_EVENT_CQ_ERR, 0);
    EXPECT_EQ(cq.verdict, EventVerdict::fatal) << "CQ_ERR taken as a rail loss another rail survives";
    EXPECT_TRUE(cq.lost_work);
    EXPECT_NE(cq.what.find("CQ_ERR"), std::string::npos) << cq.what;
    EXPECT_NE(cq.what.find("discarded"), std::string::npos) << cq.what;
    EXPECT_NE(cq.what.find("cannot go on"), std::string::npos) << cq.what;
    const EventDecision dev = decide(IBV_EVENT_DEVICE_FATAL, 0);
    EXPECT_EQ(dev.verdict, EventVerdict::lose_rail);
    EXPECT_FALSE(dev.lost_work);
    for (auto t : {IBV_EVENT_SRQ_ERR, IBV_EVENT_QP_FATAL, IBV_EVENT_PORT_ERR, IBV_EVENT_LID_CHANGE})
        EXPECT_FALSE(decide(t, 0).lost_work) << ibv_event_type_str(t);
}

TEST(AsyncEventPolicy, QpErrorsNameTheConnectionAndPeer) {
    QpRole ini;
    ini.kind = QpRole::Kind::ini;
    ini.node = 3;
    ini.rank = 5;
    ini.peer_qpn = 99;
    ini.generation = 2;
    auto d = decide(IBV_EVENT_QP_FATAL, 0, ini, 1234);
    EXPECT_EQ(d.verdict, EventVerdict::fatal);
    EXPECT_EQ(d.peer_rank, 5u);
    EXPECT_NE(d.what.find("INI QP 1234 toward node 3"), std::string::npos) << d.what;
    EXPECT_NE(d.what.find("rank 5"), std::string::npos) << d.what;

    QpRole tgt;
    tgt.kind = QpRole::Kind::tgt_owned;
    tgt.rank = 7;
    tgt.node = 1;
    tgt.peer_qpn = 4321;
    // A sender's TGT QP in the error state: let go; the sender decides from its own completion.
    for (auto t : {IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR, IBV_EVENT_QP_FATAL}) {
        d = decide(t, 0, tgt, 99);
        EXPECT_EQ(d.verdict, EventVerdict::release_tgt);
        EXPECT_EQ(d.peer_rank, 7u);  // the sender is named
        EXPECT_NE(d.what.find("sender rank 7"), std::string::npos) << d.what;
    }
    // LAST_WQE_REACHED on a TGT QP in use: it left service.
    EXPECT_EQ(decide(IBV_EVENT_QP_LAST_WQE_REACHED, 0, tgt, 99).verdict, EventVerdict::release_tgt);
    QpRole closing = tgt;
    closing.closing = true;
    EXPECT_EQ(decide(IBV_EVENT_QP_LAST_WQE_REACHED, 0, closing, 99).verdict, EventVerdict::ignore);
    EXPECT_EQ(decide(IBV_EVENT_QP_FATAL, 0, closing, 99).verdict, EventVerdict::note);
    // A QP the port no longer holds (destroyed since its event was raised): logged, not fatal.
    EXPECT_EQ(decide(IBV_EVENT_QP_FATAL, 0, QpRole{}, 77).verdict, EventVerdict::note);
    EXPECT_EQ(decide(IBV_EVENT_QP_LAST_WQE_REACHED, 0, QpRole{}, 77).verdict, EventVerdict::ignore);
    EXPECT_EQ(decide(IBV_EVENT_QP_LAST_WQE_REACHED, 0, ini, 77).verdict, EventVerdict::ignore);
    QpRole ud;
    ud.kind = QpRole::Kind::cm_ud;
    EXPECT_EQ(decide(IBV_EVENT_QP_FATAL, 0, ud, 5).verdict, EventVerdict::fatal);
    EXPECT_NE(decide(IBV_EVENT_QP_FATAL, 0, ud, 5).what.find("connection manager"), std::string::npos);
}
