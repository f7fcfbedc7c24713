// SPDX-License-Identifier: BSD-3-Clause
// SendQueue: credits, selective signaling, queued sends, in-order retirement and error flush, closed/stopped
// queues (the connection's life), against a fake QP whose post_send records what would reach the device.
#include "src/core/send_queue.h"

#include <gtest/gtest.h>

#include <vector>

using namespace xrc;

namespace {

struct Posted {
    unsigned flags;
    std::uint64_t wr_id;
};
std::vector<Posted> g_posted;
int g_post_result = 0;

int fake_post_send(ibv_qp *, ibv_send_wr *wr, ibv_send_wr **) {
    if (g_post_result != 0) return g_post_result;
    g_posted.push_back({wr->send_flags, wr->wr_id});
    return 0;
}

struct FakeQp {
    ibv_context context{};
    ibv_qp qp{};
    FakeQp() {
        context.ops.post_send = fake_post_send;
        qp.context = &context;
        g_posted.clear();
        g_post_result = 0;
    }
};

std::vector<std::pair<SendOp *, ibv_wc_status>> g_done;
void record(SendOp *op, ibv_wc_status status) noexcept {
    g_done.emplace_back(op, status);
}

ibv_wc completion_for(std::uint64_t wr_id, ibv_wc_status status) {
    ibv_wc wc{};
    wc.wr_id = wr_id;
    wc.status = status;
    return wc;
}
ibv_wc completion(SendQueue &q, ibv_wc_status status = IBV_WC_SUCCESS) {
    return completion_for(reinterpret_cast<std::uintptr_t>(&q), status);
}
// A completion naming the request posted `index`-th (0: the first) on the fake QP.
ibv_wc completion_of(std::size_t index, ibv_wc_status status) {
    return completion_for(g_posted.at(index).wr_id, status);
}

}  // namespace

TEST(SendQueue, SignalsEveryIntervalAndOnCallbacks) {
    FakeQp f;
    SendQueue q(64, 4, 0);
    q.open(&f.qp);
    SendOp inline_op;
    for (int i = 0; i < 8; ++i) ASSERT_EQ(q.try_post(inline_op), 0);
    ASSERT_EQ(g_posted.size(), 8u);
    int signaled = 0;
    for (const auto &p : g_posted) signaled += (p.flags & IBV_SEND_SIGNALED) != 0;
    EXPECT_EQ(signaled, 2);  // every 4th
    EXPECT_TRUE(g_posted[3].flags & IBV_SEND_SIGNALED);
    SendOp with_callback;
    with_callback.on_complete = record;
    ASSERT_EQ(q.try_post(with_callback), 0);
    EXPECT_TRUE(g_posted.back().flags & IBV_SEND_SIGNALED);
    EXPECT_EQ(send_queue_of(g_posted.back().wr_id), &q);
    EXPECT_EQ(g_posted.back().wr_id & 1, 0u);  // never mistaken for a receive
}

TEST(SendQueue, NeverFillsWithUnsignaledRequests) {
    FakeQp f;
    SendQueue q(16, 100, 0);
    q.open(&f.qp);  // interval larger than the ring
    SendOp op;
    while (q.credits() > 0) ASSERT_EQ(q.try_post(op), 0);
    EXPECT_TRUE(g_posted.back().flags & IBV_SEND_SIGNALED);  // the last ones signal: a completion will come
    EXPECT_EQ(q.try_post(op), EAGAIN);
    q.on_completion(completion(q));
    EXPECT_GT(q.credits(), 0u);
}

TEST(SendQueue, QueuedSendsGoOutInOrderWhenCreditReturns) {
    FakeQp f;
    SendQueue q(16, 1, 0);
    q.open(&f.qp);  // every request signaled: one completion frees one credit
    g_done.clear();
    std::vector<SendOp> ops(20);
    for (auto &op : ops) {
        op.on_complete = record;
        ASSERT_EQ(q.post_or_queue(op), 0);
    }
    EXPECT_EQ(g_posted.size(), 16u);
    EXPECT_TRUE(q.has_pending());
    for (int i = 0; i < 20; ++i) q.on_completion(completion(q));
    ASSERT_EQ(g_done.size(), 20u);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(g_done[i].first, &ops[i]) << i;
    EXPECT_FALSE(q.has_pending());
    EXPECT_EQ(q.credits(), 16u);
}

TEST(SendQueue, ErrorFailsEverythingOnceAndBreaksTheQueue) {
    FakeQp f;
    SendQueue q(4, 1, 0);
    q.open(&f.qp);
    g_done.clear();
    std::vector<SendOp> ops(6);
    for (auto &op : ops) {
        op.on_complete = record;
        ASSERT_EQ(q.post_or_queue(op), 0);
    }
    EXPECT_EQ(q.on_completion(completion(q, IBV_WC_RETRY_EXC_ERR)), IBV_WC_RETRY_EXC_ERR);
    ASSERT_EQ(g_done.size(), 6u);
    for (auto &[op, status] : g_done) EXPECT_EQ(status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(q.on_completion(completion(q, IBV_WC_WR_FLUSH_ERR)), IBV_WC_SUCCESS);  // flushes: already reported
    EXPECT_EQ(g_done.size(), 6u);
    EXPECT_TRUE(q.broken());
    SendOp late;
    EXPECT_EQ(q.try_post(late), EPIPE);
    EXPECT_EQ(q.outstanding_callbacks(), 0u);
}

TEST(SendQueue, PostFailureIsReturnedNotRecorded) {
    FakeQp f;
    SendQueue q(4, 1, 0);
    q.open(&f.qp);
    g_post_result = ENOMEM;
    SendOp op;
    EXPECT_EQ(q.try_post(op), ENOMEM);
    EXPECT_EQ(q.credits(), 4u);
}

namespace {
int g_blocked = 0;
void count_blocked(void *owner) noexcept {
    ++g_blocked;
    (void)owner;
}
}  // namespace

TEST(SendQueue, ClosedQueueQueuesInOrderAndCallsTheBlockedHookUntilOpened) {
    FakeQp f;
    g_blocked = 0;
    g_done.clear();
    SendQueue q(16, 1, 3, count_blocked, nullptr);
    EXPECT_FALSE(q.is_open());
    EXPECT_FALSE(q.can_post());
    EXPECT_FALSE(q.has_pending());
    SendOp inline_op;
    EXPECT_EQ(q.try_post(inline_op), EAGAIN);  // sendi falls back to the queued path
    std::vector<SendOp> ops(3);
    for (auto &op : ops) {
        op.on_complete = record;
        ASSERT_EQ(q.post_or_queue(op), 0);
    }
    EXPECT_EQ(g_blocked, 3);
    EXPECT_TRUE(q.has_pending());
    EXPECT_TRUE(g_posted.empty());
    q.open(&f.qp);
    EXPECT_EQ(g_posted.size(), 3u);
    EXPECT_FALSE(q.has_pending());
    EXPECT_TRUE(q.can_post());
    for (int i = 0; i < 3; ++i) q.on_completion(completion(q));
    ASSERT_EQ(g_done.size(), 3u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(g_done[i].first, &ops[i]);
}

TEST(SendQueue, StoppedQueueDrainsWhatWasPostedAndQueuesTheRestForTheNextQp) {
    FakeQp f, g;
    g_done.clear();
    SendQueue q(16, 4, 0);
    q.open(&f.qp);
    SendOp a, b;
    ASSERT_EQ(q.try_post(a), 0);  // unsignaled (interval 4)
    ASSERT_EQ(q.try_post(b), 0);
    EXPECT_TRUE(q.needs_fence());
    q.stop();
    SendOp later;
    later.on_complete = record;
    ASSERT_EQ(q.post_or_queue(later), 0);  // queued behind the stop
    EXPECT_EQ(g_posted.size(), 2u);
    SendOp fence;
    fence.on_complete = record;
    ASSERT_EQ(q.post_fence(fence), 0);
    EXPECT_TRUE(g_posted.back().flags & IBV_SEND_SIGNALED);
    EXPECT_FALSE(q.needs_fence());
    EXPECT_FALSE(q.idle());
    q.on_completion(completion(q));  // the fence's completion retires all three
    EXPECT_TRUE(q.idle());
    ASSERT_EQ(g_done.size(), 1u);
    EXPECT_EQ(g_done[0].first, &fence);
    q.detach();
    EXPECT_EQ(q.qp(), nullptr);
    EXPECT_TRUE(q.has_pending());
    g_posted.clear();
    q.open(&g.qp);  // a new connection: the queued send goes out on it
    ASSERT_EQ(g_posted.size(), 1u);
    q.on_completion(completion(q));
    ASSERT_EQ(g_done.size(), 2u);
    EXPECT_EQ(g_done[1].first, &later);
}

TEST(SendQueue, FailingAClosedQueueCompletesEveryQueuedOpOnce) {
    g_done.clear();
    SendQueue q(8, 1, 0);
    std::vector<SendOp> ops(4);
    for (auto &op : ops) {
        op.on_complete = record;
        ASSERT_EQ(q.post_or_queue(op), 0);
    }
    q.fail(IBV_WC_RETRY_EXC_ERR);
    ASSERT_EQ(g_done.size(), 4u);
    for (auto &[op, status] : g_done) EXPECT_EQ(status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_TRUE(q.broken());
    EXPECT_FALSE(q.has_pending());
    SendOp late;
    EXPECT_EQ(q.post_or_queue(late), EPIPE);
    q.fail(IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(g_done.size(), 4u);
}

TEST(SendQueue, UsedFlagMarksRecentPosts) {
    FakeQp f;
    SendQueue q(8, 1, 0);
    q.open(&f.qp);
    EXPECT_FALSE(q.used());
    SendOp op;
    ASSERT_EQ(q.try_post(op), 0);
    EXPECT_TRUE(q.used());
    q.clear_used();
    EXPECT_FALSE(q.used());
}

TEST(SendQueue, AnErrorCompletionNamesTheRequestThatFailed) {
    FakeQp f;
    SendQueue q(8, 4, 0);
    q.open(&f.qp);
    g_done.clear();
    SendOp unowned, first, second;
    first.on_complete = second.on_complete = record;
    for (int round = 0; round < 3; ++round) {  // around the ring more than once: slots are reused
        for (int i = 0; i < 2; ++i) ASSERT_EQ(q.try_post(unowned), 0);
        ASSERT_EQ(q.try_post(first), 0);
        q.on_completion(completion(q));
    }
    ASSERT_EQ(q.try_post(unowned), 0);  // unsignaled, succeeded: no completion of its own
    ASSERT_EQ(q.try_post(first), 0);
    ASSERT_EQ(q.try_post(second), 0);
    ASSERT_EQ(g_posted.size(), 12u);
    ibv_wc wc = completion(q, IBV_WC_REM_ACCESS_ERR);
    wc.wr_id = g_posted[10].wr_id;  // the device reports the failure of `first`, behind the unsignaled one
    EXPECT_EQ(q.failed_op(wc), &first);
    wc.wr_id = g_posted[11].wr_id;
    EXPECT_EQ(q.failed_op(wc), &second);
    wc.wr_id = g_posted[9].wr_id;
    EXPECT_EQ(q.failed_op(wc), nullptr);  // the inline send had no owner
    wc.wr_id = g_posted[8].wr_id;         // retired long ago (its slot is free)
    EXPECT_EQ(q.failed_op(wc), nullptr);
    g_done.clear();
    EXPECT_EQ(q.on_completion(wc), IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(g_done.size(), 2u);  // first and second, both with the error
}

TEST(SendQueue, SignalEveryPostLastsUntilDetachAndRetiredFollowsAMark) {
    FakeQp f;
    SendQueue q(64, 4, 0);
    q.open(&f.qp);
    SendOp inline_op;
    ASSERT_EQ(q.try_post(inline_op), 0);
    ASSERT_EQ(q.try_post(inline_op), 0);
    EXPECT_TRUE(q.needs_fence());
    const std::uint32_t mark = q.posted();
    EXPECT_FALSE(q.retired(mark));
    q.signal_every_post();
    for (int i = 0; i < 3; ++i) ASSERT_EQ(q.try_post(inline_op), 0);
    ASSERT_EQ(g_posted.size(), 5u);
    for (std::size_t i = 2; i < 5; ++i) EXPECT_TRUE(g_posted[i].flags & IBV_SEND_SIGNALED) << i;
    EXPECT_FALSE(q.needs_fence());  // the signaled ones retire the two before them
    q.on_completion(completion(q));
    EXPECT_TRUE(q.retired(mark));  // the first signaled completion retired both unsignaled ones
    EXPECT_FALSE(q.retired(q.posted()));
    while (!q.idle()) q.on_completion(completion(q));
    EXPECT_TRUE(q.retired(q.posted()));
    q.detach();
    q.open(&f.qp);
    g_posted.clear();
    for (int i = 0; i < 4; ++i) ASSERT_EQ(q.try_post(inline_op), 0);
    int signaled = 0;
    for (const auto &p : g_posted) signaled += (p.flags & IBV_SEND_SIGNALED) != 0;
    EXPECT_EQ(signaled, 1);  // the next connection signals every 4th again
}

TEST(SendQueue, ACompletionRetiresUpToTheRequestItNamesAndCallsBackInOrder) {
    FakeQp f;
    SendQueue q(8, 4, 0);
    q.open(&f.qp);
    SendOp inline_op;
    g_done.clear();
    for (int round = 0; round < 5; ++round) {  // across the ring's end
        g_posted.clear();
        for (int i = 0; i < 4; ++i) ASSERT_EQ(q.try_post(inline_op), 0);
        ASSERT_TRUE(g_posted[3].flags & IBV_SEND_SIGNALED);
        EXPECT_EQ(q.outstanding(), 4u);
        ibv_wc wc = completion(q);
        wc.wr_id = g_posted[3].wr_id;
        q.on_completion(wc);  // no callback outstanding: the four retire at once
        EXPECT_TRUE(q.idle()) << round;
    }
    // With a callback outstanding, the requests before the signaled one complete in order, once each.
    g_posted.clear();
    SendOp with_callback;
    with_callback.on_complete = record;
    ASSERT_EQ(q.try_post(inline_op), 0);
    ASSERT_EQ(q.try_post(with_callback), 0);
    ASSERT_TRUE(g_posted[1].flags & IBV_SEND_SIGNALED);
    ibv_wc wc = completion(q);
    wc.wr_id = g_posted[1].wr_id;
    q.on_completion(wc);
    EXPECT_TRUE(q.idle());
    ASSERT_EQ(g_done.size(), 1u);
    EXPECT_EQ(g_done[0].first, &with_callback);
    EXPECT_EQ(q.outstanding_callbacks(), 0u);
}

// A queue of 8 that requeues after a refusal, open on a fake QP, with nothing recorded as done yet.
struct RequeueingQueue {
    FakeQp f;
    SendQueue q;
    explicit RequeueingQueue(std::uint32_t signal_interval) : q(8, signal_interval, 0) {
        q.requeue_refused();
        q.open(&f.qp);
        g_done.clear();
    }
};

// A refused request (its SRQ gone with its dying owner) costs only itself: the responder executed the older ones
// and none of the newer ones, which go out again, in order and before what was queued, on the next connection.
TEST(SendQueue, ARefusalCompletesTheOlderRequeuesTheNewerAndClosesTheQueue) {
    RequeueingQueue rq(4);
    SendQueue &q = rq.q;
    std::vector<SendOp> ops(10);
    for (auto &op : ops) {
        op.on_complete = record;
        ASSERT_EQ(q.post_or_queue(op), 0);
    }
    ASSERT_EQ(g_posted.size(), 8u);  // ops 8 and 9 queued
    EXPECT_EQ(q.on_completion(completion_of(3, IBV_WC_REM_INV_REQ_ERR)), IBV_WC_REM_INV_REQ_ERR);
    EXPECT_FALSE(q.broken());
    EXPECT_FALSE(q.is_open());
    ASSERT_EQ(g_done.size(), 4u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(g_done[i], std::make_pair(&ops[i], IBV_WC_SUCCESS)) << i;
    EXPECT_EQ(g_done[3], std::make_pair(&ops[3], IBV_WC_REM_INV_REQ_ERR));
    EXPECT_EQ(q.outstanding(), 0u);
    EXPECT_EQ(q.outstanding_callbacks(), 0u);
    // The flush of the QP left behind is not this queue's any more.
    EXPECT_EQ(q.on_completion(completion_of(5, IBV_WC_WR_FLUSH_ERR)), IBV_WC_SUCCESS);
    EXPECT_EQ(g_done.size(), 4u);
    // A send made meanwhile queues behind the requeued ones.
    SendOp later;
    later.on_complete = record;
    ASSERT_EQ(q.post_or_queue(later), 0);
    FakeQp next;
    next.qp.qp_num = 7;
    q.open(&next.qp);
    ASSERT_EQ(g_posted.size(), 7u);  // 4..9, then the later one
    for (int i = 0; i < 7; ++i) q.on_completion(completion_of(i, IBV_WC_SUCCESS));
    ASSERT_EQ(g_done.size(), 11u);
    for (int i = 4; i < 10; ++i) EXPECT_EQ(g_done[i].first, &ops[i]) << i;
    EXPECT_EQ(g_done[10].first, &later);
    for (std::size_t i = 4; i < g_done.size(); ++i) EXPECT_EQ(g_done[i].second, IBV_WC_SUCCESS) << i;
}

// A callback of an older request that sends again while the refusal is handled queues behind the requeued ones.
TEST(SendQueue, ASendFromACallbackDuringARefusalQueuesBehindTheRequeued) {
    RequeueingQueue rq(1);
    SendQueue &q = rq.q;
    static SendQueue *queue;
    static SendOp resent;
    queue = &q;
    resent = SendOp{};
    resent.on_complete = record;
    SendOp first, refused, after;
    first.on_complete = [](SendOp *op, ibv_wc_status status) noexcept {
        record(op, status);
        EXPECT_EQ(queue->post_or_queue(resent), 0);
    };
    refused.on_complete = after.on_complete = record;
    for (SendOp *op : {&first, &refused, &after}) ASSERT_EQ(q.post_or_queue(*op), 0);
    q.on_completion(completion_of(1, IBV_WC_REM_ACCESS_ERR));
    EXPECT_EQ(g_posted.size(), 3u);  // nothing reached the QP in the error state
    FakeQp next;
    q.open(&next.qp);
    ASSERT_EQ(g_posted.size(), 2u);
    q.on_completion(completion_of(0, IBV_WC_SUCCESS));
    q.on_completion(completion_of(1, IBV_WC_SUCCESS));
    ASSERT_EQ(g_done.size(), 4u);
    EXPECT_EQ(g_done[2].first, &after);
    EXPECT_EQ(g_done[3].first, &resent);
}

namespace {

// A queue set to `mode` (none when null) breaks on `status` as on any error: every op completes with it.
void expect_breaks(void (*mode)(SendQueue &), ibv_wc_status status) {
    FakeQp f;
    SendQueue q(8, 1, 0);
    if (mode != nullptr) mode(q);
    q.open(&f.qp);
    g_done.clear();
    SendOp a, b;
    a.on_complete = record;
    b.on_complete = record;
    ASSERT_EQ(q.post_or_queue(a), 0);
    ASSERT_EQ(q.post_or_queue(b), 0);
    EXPECT_FALSE(q.would_requeue(completion_of(0, status)));
    EXPECT_EQ(q.on_completion(completion_of(0, status)), status);
    EXPECT_TRUE(q.broken());
    EXPECT_EQ(g_done.size(), 2u);
    for (auto &[op, st] : g_done) EXPECT_EQ(st, status);
}

}  // namespace

// Without requeue_refused(), or with another error than a refusal, the queue breaks as on any error.
TEST(SendQueue, ARefusalBreaksTheQueueWhenItCannotRequeue) {
    expect_breaks(nullptr, IBV_WC_REM_INV_REQ_ERR);
    expect_breaks([](SendQueue &q) { q.requeue_refused(); }, IBV_WC_RETRY_EXC_ERR);
}

// A newer request nobody owns (an idempotent report, a temporary) is not sent again; the owned ones are.
TEST(SendQueue, ARefusalLeavesOutNewerRequestsNobodyOwns) {
    RequeueingQueue rq(1);
    SendQueue &q = rq.q;
    SendOp refused, report, owned;
    refused.on_complete = owned.on_complete = record;
    for (SendOp *op : {&refused, &report, &owned}) ASSERT_EQ(q.post_or_queue(*op), 0);
    EXPECT_EQ(q.on_completion(completion_of(0, IBV_WC_REM_INV_REQ_ERR)), IBV_WC_REM_INV_REQ_ERR);
    EXPECT_FALSE(q.broken());
    FakeQp next;
    q.open(&next.qp);
    ASSERT_EQ(g_posted.size(), 1u);  // only the owned one
    q.on_completion(completion_of(0, IBV_WC_SUCCESS));
    ASSERT_EQ(g_done.size(), 2u);
    EXPECT_EQ(g_done[1], std::make_pair(&owned, IBV_WC_SUCCESS));
}

// A remote operation error (the receive buffer's registration gone with a dying process) is a refusal too.
TEST(SendQueue, ARemoteOperationErrorIsARefusal) {
    RequeueingQueue rq(1);
    SendQueue &q = rq.q;
    SendOp a, b;
    a.on_complete = b.on_complete = record;
    ASSERT_EQ(q.post_or_queue(a), 0);
    ASSERT_EQ(q.post_or_queue(b), 0);
    EXPECT_EQ(q.on_completion(completion_of(0, IBV_WC_REM_OP_ERR)), IBV_WC_REM_OP_ERR);
    EXPECT_FALSE(q.broken());
    ASSERT_EQ(g_done.size(), 1u);
    EXPECT_EQ(g_done[0], std::make_pair(&a, IBV_WC_REM_OP_ERR));
}

// A completion of the request posted `index`-th on the QP numbered 5 (OutageQueue's).
ibv_wc completion_on_5(std::size_t index, ibv_wc_status status) {
    ibv_wc wc = completion_of(index, status);
    wc.qp_num = 5;
    return wc;
}

// A queue of 8 that rides outages (hands back after a timeout), open on a fake QP numbered 5 toward TGT QP 9.
struct OutageQueue {
    FakeQp f;
    SendQueue q;
    explicit OutageQueue(std::uint32_t signal_interval) : q(8, signal_interval, 0) {
        q.ride_outages();
        f.qp.qp_num = 5;
        q.open(&f.qp, 9);
        g_done.clear();
    }
};

// A timeout (nobody acknowledged the request within the retry budget) breaks nothing: the older requests were
// acknowledged (done); the timed-out one and the newer ones may have reached the responder, so each goes back to
// its owner naming the connection it was posted on; what never left the queue goes back as never posted. All in
// order, with the queue closed (not broken) first.
TEST(SendQueue, ATimeoutHandsBackWhatWasNotAcknowledgedInOrder) {
    OutageQueue oq(4);
    SendQueue &q = oq.q;
    static std::vector<std::pair<SendOp *, SourceKey>> on;
    on.clear();
    static SendQueue *queue;
    queue = &q;
    std::vector<SendOp> ops(10);
    for (auto &op : ops) {
        op.on_complete = [](SendOp *o, ibv_wc_status status) noexcept {
            record(o, status);
            on.emplace_back(o, o->posted_on);
            EXPECT_FALSE(queue->is_open());
            EXPECT_FALSE(queue->broken());
        };
        ASSERT_EQ(q.post_or_queue(op), 0);
    }
    ASSERT_EQ(g_posted.size(), 8u);  // 8 and 9 queued
    EXPECT_TRUE(q.would_requeue(completion_on_5(3, IBV_WC_RETRY_EXC_ERR)));
    EXPECT_EQ(q.on_completion(completion_on_5(3, IBV_WC_RETRY_EXC_ERR)), IBV_WC_RETRY_EXC_ERR);
    EXPECT_FALSE(q.broken());
    EXPECT_FALSE(q.is_open());
    EXPECT_FALSE(q.has_pending());
    EXPECT_EQ(q.outstanding(), 0u);
    EXPECT_EQ(q.outstanding_callbacks(), 0u);
    ASSERT_EQ(g_done.size(), 10u);
    for (int i = 0; i < 10; ++i) {
        EXPECT_EQ(g_done[i].first, &ops[i]) << i;
        EXPECT_EQ(g_done[i].second, i < 3 ? IBV_WC_SUCCESS : IBV_WC_RETRY_EXC_ERR) << i;
        EXPECT_EQ(on[i].second, i >= 3 && i < 8 ? source_key(9, 5) : 0u) << i;
    }
    // The flush of the QP left behind is not this queue's any more.
    EXPECT_EQ(q.on_completion(completion_on_5(6, IBV_WC_WR_FLUSH_ERR)), IBV_WC_SUCCESS);
    EXPECT_EQ(g_done.size(), 10u);
}

// What an owner sends again from its callback (the copy) queues for the next connection, in the order of the
// callbacks, and nothing reaches the QP in the error state.
TEST(SendQueue, CopiesSentFromTheHandBackGoOutOnTheNextConnectionInOrder) {
    OutageQueue oq(1);
    SendQueue &q = oq.q;
    static SendQueue *queue;
    static std::vector<SendOp> copies;
    queue = &q;
    copies.assign(4, SendOp{});
    static std::size_t made;
    made = 0;
    std::vector<SendOp> ops(4);
    for (auto &op : ops) {
        op.on_complete = [](SendOp *o, ibv_wc_status status) noexcept {
            record(o, status);
            if (status == IBV_WC_SUCCESS) return;
            SendOp &copy = copies.at(made++);
            copy.on_complete = record;
            EXPECT_EQ(queue->post_or_queue(copy), 0);
        };
        ASSERT_EQ(q.post_or_queue(op), 0);
    }
    q.on_completion(completion_on_5(0, IBV_WC_SUCCESS));
    q.on_completion(completion_on_5(1, IBV_WC_RETRY_EXC_ERR));
    EXPECT_EQ(g_posted.size(), 4u);
    EXPECT_EQ(made, 3u);
    FakeQp next;
    next.qp.qp_num = 6;
    q.open(&next.qp, 10);
    ASSERT_EQ(g_posted.size(), 3u);
    for (int i = 0; i < 3; ++i) q.on_completion(completion_of(i, IBV_WC_SUCCESS));
    ASSERT_EQ(g_done.size(), 7u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(g_done[4 + i], std::make_pair(&copies[i], IBV_WC_SUCCESS)) << i;
}

// Without ride_outages(), or with it turned off again (another rail reaches the node), or with another error than a
// timeout, the queue breaks as on any error.
TEST(SendQueue, ATimeoutBreaksTheQueueThatDoesNotRideOutages) {
    expect_breaks(nullptr, IBV_WC_RETRY_EXC_ERR);
    expect_breaks([](SendQueue &q) { q.ride_outages(); }, IBV_WC_REM_ACCESS_ERR);
    expect_breaks(
        [](SendQueue &q) {
            q.ride_outages();
            q.ride_outages(false);
        },
        IBV_WC_RETRY_EXC_ERR);
}

// A queue that broke starts over when reset (its rail came back): closed until its next connection, where what was
// queued meanwhile goes out; the flush of the QP it broke on is not its own.
TEST(SendQueue, ABrokenQueueResetStartsOverClosed) {
    FakeQp f;
    f.qp.qp_num = 5;
    SendQueue q(8, 1, 0);
    q.open(&f.qp);
    g_done.clear();
    SendOp a, b;
    a.on_complete = b.on_complete = record;
    ASSERT_EQ(q.post_or_queue(a), 0);
    ASSERT_EQ(q.post_or_queue(b), 0);
    ibv_wc wc = completion_of(0, IBV_WC_RETRY_EXC_ERR);
    wc.qp_num = 5;
    q.on_completion(wc);
    ASSERT_TRUE(q.broken());
    ASSERT_EQ(g_done.size(), 2u);
    q.reset();
    EXPECT_FALSE(q.broken());
    EXPECT_FALSE(q.is_open());
    EXPECT_TRUE(q.idle());
    wc = completion_of(1, IBV_WC_WR_FLUSH_ERR);
    wc.qp_num = 5;
    EXPECT_TRUE(q.stale(wc));
    SendOp c;
    c.on_complete = record;
    ASSERT_EQ(q.post_or_queue(c), 0);  // queued: closed
    FakeQp next;
    next.qp.qp_num = 6;
    q.open(&next.qp);
    ASSERT_EQ(g_posted.size(), 1u);
    q.on_completion(completion_of(0, IBV_WC_SUCCESS));
    ASSERT_EQ(g_done.size(), 3u);
    EXPECT_EQ(g_done[2], std::make_pair(&c, IBV_WC_SUCCESS));
}
