// SPDX-License-Identifier: BSD-3-Clause
// SendQueue::keep_copies: under ULFM a link's queue keeps a copy of every inline send nobody owns, in the ring slot
// of its request, so that after a refusal what followed the refused request goes out again, once and in order,
// while the sends themselves stay inline and unsignaled. Against a fake QP that records what each post would put on
// the wire (the bytes as they were at the post, as an inline send's are), and a model of the responder: a refusal
// executed every request before it on its QP and none after it.
#include "src/core/send_queue.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

using namespace xrc;

namespace {

struct Wire {
    std::uint32_t qp_num;
    unsigned flags;
    std::uint64_t wr_id;
    std::uint32_t srqn;
    std::string bytes;
};
std::vector<Wire> g_wire;

int record_post(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **) {
    const ibv_sge &sge = wr->sg_list[0];
    g_wire.push_back({qp->qp_num, wr->send_flags, wr->wr_id, wr->qp_type.xrc.remote_srqn,
                      std::string(reinterpret_cast<const char *>(sge.addr), sge.length)});
    return 0;
}

struct Qp {
    ibv_context context{};
    ibv_qp qp{};
    explicit Qp(std::uint32_t num) {
        context.ops.post_send = record_post;
        qp.context = &context;
        qp.qp_num = num;
    }
};

std::vector<std::pair<SendOp *, ibv_wc_status>> g_calls;
void called(SendOp *op, ibv_wc_status status) noexcept {
    g_calls.emplace_back(op, status);
}

ibv_wc completion_of(const Wire &w, ibv_wc_status status) {
    ibv_wc wc{};
    wc.wr_id = w.wr_id;
    wc.qp_num = w.qp_num;
    wc.status = status;
    return wc;
}

// An inline SRQ send of `text` to `srqn`, prepared in place in the copy the queue's next post takes, as sendi does.
void send_kept(SendQueue &q, std::uint32_t srqn, const std::string &text) {
    ASSERT_TRUE(q.ready());
    ASSERT_TRUE(q.keeps_copies());
    KeptSend *kept = &q.next_kept();
    ASSERT_LE(text.size(), q.kept_bytes());
    std::memcpy(kept->data, text.data(), text.size());
    SendOp &op = kept->op;
    op.sge.addr = reinterpret_cast<std::uintptr_t>(kept->data);
    op.sge.length = static_cast<std::uint32_t>(text.size());
    op.sge.lkey = 0;
    op.wr.sg_list = &op.sge;
    op.wr.num_sge = 1;
    op.wr.opcode = IBV_WR_SEND_WITH_IMM;
    op.wr.send_flags = IBV_SEND_INLINE;
    op.wr.qp_type.xrc.remote_srqn = srqn;
    ASSERT_EQ(q.post_kept(*kept), 0);
}

// An op prepared on the caller's side for `text` at `buffer` (which the caller may reuse once posted).
void prepare(SendOp &op, std::uint32_t srqn, char *buffer, const std::string &text, unsigned flags) {
    std::memcpy(buffer, text.data(), text.size());
    op.sge = ibv_sge{reinterpret_cast<std::uintptr_t>(buffer), static_cast<std::uint32_t>(text.size()), 0};
    op.wr.sg_list = &op.sge;
    op.wr.num_sge = 1;
    op.wr.opcode = IBV_WR_SEND_WITH_IMM;
    op.wr.send_flags = flags;
    op.wr.qp_type.xrc.remote_srqn = srqn;
}

// A queue of `depth` that requeues after a refusal and keeps copies of up to 32 bytes, open on QP 1.
struct KeepingQueue {
    Qp first{1};
    SendQueue q;
    KeepingQueue(std::uint32_t depth, std::uint32_t interval) : q(depth, interval, 0) {
        q.requeue_refused();
        q.keep_copies(32);
        q.open(&first.qp);
        g_wire.clear();
        g_calls.clear();
    }
};

constexpr std::uint32_t kLive = 11, kDead = 22;

}  // namespace

// A kept send is inline, unsignaled and calls nobody; each post takes the next slot's copy.
TEST(SendQueueCopies, AKeptSendStaysInlineAndUnsignaled) {
    KeepingQueue kq(8, 4);
    SendQueue &q = kq.q;
    EXPECT_GE(q.kept_bytes(), 32u);
    const KeptSend *before = &q.next_kept();
    send_kept(q, kLive, "one");
    EXPECT_NE(&q.next_kept(), before);
    send_kept(q, kLive, "two");
    ASSERT_EQ(g_wire.size(), 2u);
    for (const Wire &w : g_wire) {
        EXPECT_EQ(w.flags, unsigned{IBV_SEND_INLINE});
        EXPECT_EQ(w.srqn, kLive);
    }
    EXPECT_EQ(g_wire[0].bytes, "one");
    EXPECT_EQ(q.outstanding(), 2u);
    EXPECT_EQ(q.outstanding_callbacks(), 0u);
    EXPECT_TRUE(q.needs_fence());  // unsignaled: a later signaled request or a fence retires them
    // Every 4th request is signaled as without copies, and its completion retires the copies before it.
    send_kept(q, kLive, "three");
    send_kept(q, kLive, "four");
    EXPECT_TRUE(g_wire[3].flags & IBV_SEND_SIGNALED);
    q.on_completion(completion_of(g_wire[3], IBV_WC_SUCCESS));
    EXPECT_TRUE(q.idle());
    EXPECT_TRUE(g_calls.empty());
    // A queue told to keep none has none (its sender assembles on its own stack).
    SendQueue plain(8, 4, 0);
    plain.keep_copies(0);
    EXPECT_FALSE(plain.keeps_copies());
    EXPECT_EQ(plain.kept_bytes(), 0u);
}

// The copies are made when the queue first opens, not when it is told to keep them: every node of a job has a link,
// and only those a process talks to are connected.
TEST(SendQueueCopies, CopiesAreMadeAtTheFirstOpenOnly) {
    SendQueue q(8, 4, 0);
    q.keep_copies(32);
    EXPECT_TRUE(q.keeps_copies());
    EXPECT_EQ(q.kept_memory(), 0u);
    Qp first(1);
    q.open(&first.qp);
    EXPECT_EQ(q.kept_memory(), 8 * (sizeof(KeptSend) + 64));  // whole cache lines per copy
    const KeptSend *copy = &q.next_kept();
    q.detach();
    Qp second(2);
    q.open(&second.qp);
    EXPECT_EQ(&q.next_kept(), copy);  // made once: the same copies on the next connection
    EXPECT_FALSE(q.broken());
}

// After a refusal, the kept sends that followed it go out again over the next connection, once each, in order with
// the owned ones, with their own bytes; those before it were executed and are not sent again.
TEST(SendQueueCopies, ARefusalSendsTheKeptCopiesThatFollowedItAgainInOrder) {
    KeepingQueue kq(8, 4);
    SendQueue &q = kq.q;
    char owned_bytes[8];
    SendOp owned;
    owned.on_complete = called;
    send_kept(q, kLive, "a");
    send_kept(q, kDead, "refused");
    send_kept(q, kLive, "b");
    prepare(owned, kLive, owned_bytes, "c", 0);
    ASSERT_EQ(q.post_or_queue(owned), 0);
    send_kept(q, kLive, "d");
    ASSERT_EQ(g_wire.size(), 5u);
    const ibv_wc refusal = completion_of(g_wire[1], IBV_WC_REM_INV_REQ_ERR);
    EXPECT_EQ(q.failed_op(refusal), nullptr);  // no owner
    ASSERT_NE(q.failed_copy(refusal), nullptr);
    EXPECT_EQ(q.failed_copy(refusal)->wr.qp_type.xrc.remote_srqn, kDead);
    EXPECT_EQ(q.failed_copy(completion_of(g_wire[3], IBV_WC_REM_INV_REQ_ERR)), nullptr);  // owned
    ASSERT_TRUE(q.would_requeue(refusal));
    EXPECT_EQ(q.on_completion(refusal), IBV_WC_REM_INV_REQ_ERR);
    EXPECT_FALSE(q.broken());
    EXPECT_FALSE(q.is_open());
    EXPECT_TRUE(q.has_pending());
    EXPECT_TRUE(g_calls.empty());  // the refused one and the kept ones have no owner; "c" waits to go again
    Qp second(2);
    q.open(&second.qp);
    ASSERT_EQ(g_wire.size(), 8u);
    const char *again[] = {"b", "c", "d"};
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(g_wire[5 + i].qp_num, 2u);
        EXPECT_EQ(g_wire[5 + i].bytes, again[i]) << i;
        EXPECT_EQ(g_wire[5 + i].srqn, kLive);
    }
    EXPECT_TRUE(g_wire[5].flags & IBV_SEND_INLINE);
    EXPECT_FALSE(g_wire[6].flags & IBV_SEND_INLINE);  // the owned one as its owner prepared it
    EXPECT_TRUE(g_wire[7].flags & IBV_SEND_INLINE);
    q.on_completion(completion_of(g_wire[6], IBV_WC_SUCCESS));
    ASSERT_EQ(g_calls.size(), 1u);
    EXPECT_EQ(g_calls[0], std::make_pair(&owned, IBV_WC_SUCCESS));
}

// A fragment's inline send whose fragment goes back to its list at once: the queue copies its bytes, so what goes
// out again after a refusal is the message, not what the fragment holds by then.
TEST(SendQueueCopies, TryPostCopyKeepsTheBytesOfAnOpItsCallerReuses) {
    KeepingQueue kq(8, 4);
    SendQueue &q = kq.q;
    send_kept(q, kDead, "refused");
    char fragment[16];
    SendOp op;
    prepare(op, kLive, fragment, "fragment", IBV_SEND_INLINE);
    ASSERT_EQ(q.try_post_copy(op), 0);
    std::memcpy(fragment, "reused!!", 8);
    ASSERT_EQ(g_wire.size(), 2u);
    EXPECT_EQ(g_wire[1].bytes, "fragment");
    EXPECT_EQ(q.on_completion(completion_of(g_wire[0], IBV_WC_REM_ACCESS_ERR)), IBV_WC_REM_ACCESS_ERR);
    Qp second(2);
    q.open(&second.qp);
    ASSERT_EQ(g_wire.size(), 3u);
    EXPECT_EQ(g_wire[2].bytes, "fragment");
    EXPECT_TRUE(g_wire[2].flags & IBV_SEND_INLINE);
    // Too large for a copy, or no credit: EAGAIN (the caller keeps its fragment and queues it instead).
    char large[128] = {};
    SendOp big;
    prepare(big, kLive, large, std::string(100, 'x'), IBV_SEND_INLINE);
    EXPECT_EQ(q.try_post_copy(big), EAGAIN);
    // Without copies, or on a queue that never requeues (the loopback's, whose copies are only where its sender
    // assembles), it is try_post(): nothing would send it again.
    Qp plain_qp(3);
    SendQueue plain(8, 4, 0);
    plain.open(&plain_qp.qp);
    EXPECT_EQ(plain.try_post_copy(big), 0);
    Qp loop_qp(4);
    SendQueue loopback(8, 4, 0);
    loopback.keep_copies(32);
    loopback.open(&loop_qp.qp);
    g_wire.clear();
    char small[16];
    SendOp op2;
    prepare(op2, kLive, small, "direct", IBV_SEND_INLINE);
    ASSERT_EQ(loopback.try_post_copy(op2), 0);
    ASSERT_EQ(g_wire.size(), 1u);
    EXPECT_EQ(g_wire[0].wr_id, op2.wr.wr_id);  // posted as it was, not from a copy
}

// Copies requeued behind a refusal move to the slots their new requests take (the ring has moved on), also when the
// dead rank's are dropped from among them, and a second refusal on the new connection sends again what followed it
// there, from the slots they moved to.
TEST(SendQueueCopies, CopiesSurviveTwoRefusalsAndDropsAcrossTheRingsEnd) {
    KeepingQueue kq(8, 8);
    SendQueue &q = kq.q;
    // Around the ring once first, so that what follows straddles its end.
    for (int i = 0; i < 6; ++i) send_kept(q, kLive, "warm" + std::to_string(i));
    q.on_completion(completion_of(g_wire[5], IBV_WC_SUCCESS));  // the last of them is signaled (credits low)
    ASSERT_TRUE(q.idle());
    g_wire.clear();
    send_kept(q, kDead, "x0");
    send_kept(q, kLive, "l0");
    send_kept(q, kDead, "x1");
    send_kept(q, kLive, "l1");
    send_kept(q, kLive, "l2");
    send_kept(q, kDead, "x2");
    send_kept(q, kLive, "l3");
    ASSERT_EQ(g_wire.size(), 7u);
    q.on_completion(completion_of(g_wire[0], IBV_WC_REM_INV_REQ_ERR));
    EXPECT_EQ(q.drop_pending_if([](const SendOp &op) { return op.wr.qp_type.xrc.remote_srqn == kDead; },
                                IBV_WC_REM_ABORT_ERR),
              2u);
    Qp second(2);
    q.open(&second.qp);
    ASSERT_EQ(g_wire.size(), 11u);
    const char *once[] = {"l0", "l1", "l2", "l3"};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(g_wire[7 + i].bytes, once[i]) << i;
    // The second connection refuses l1 (say, another rank died): l2 and l3 go again, from where they moved.
    q.on_completion(completion_of(g_wire[8], IBV_WC_REM_INV_REQ_ERR));
    Qp third(3);
    q.open(&third.qp);
    ASSERT_EQ(g_wire.size(), 13u);
    EXPECT_EQ(g_wire[11].bytes, "l2");
    EXPECT_EQ(g_wire[12].bytes, "l3");
    EXPECT_EQ(g_wire[12].qp_num, 3u);
    EXPECT_TRUE(g_calls.empty());
}

// The guarantee, over many random schedules: kept, copied, owned and unowned (report) sends to a live and a dead
// rank, with or without credit, completions retiring some, refusals of the dead rank's requests (the responder
// executed everything before a refusal on its QP and nothing after it), the dead rank's queued sends dropped, and
// the connection made again. Every live message but the reports reaches the responder exactly once, in the order it
// was sent; every owned one is called back once.
TEST(SendQueueCopies, EveryLiveMessageArrivesOnceInOrderWhateverTheRefusals) {
    std::mt19937 random(20261205);
    for (int round = 0; round < 400; ++round) {
        const std::uint32_t depth = 2 + random() % 9;
        const std::uint32_t interval = 1 + random() % depth;
        SendQueue q(depth, interval, 0);
        q.requeue_refused();
        q.keep_copies(16);
        std::deque<Qp> qps;
        qps.emplace_back(1);
        q.open(&qps.back().qp);
        g_wire.clear();
        g_calls.clear();
        struct Owned {
            SendOp op;
            char bytes[16];
        };
        std::deque<Owned> owned;
        std::vector<std::string> live_sent;  // what must arrive, in order
        std::size_t first_of_qp = 0;         // g_wire index of the current QP's first request
        std::size_t acked = 0;               // g_wire index up to which the current QP's requests were executed
        std::vector<std::string> arrived;
        const auto arrive = [&](std::size_t from, std::size_t to) {
            for (std::size_t i = from; i < to; ++i)
                if (g_wire[i].srqn == kLive) arrived.push_back(g_wire[i].bytes);
        };
        int refusals = 0;
        for (int n = 0; n < 40; ++n) {
            const std::uint32_t srqn = random() % 4 == 0 ? kDead : kLive;
            const std::string text = std::to_string(n);
            const int kind = static_cast<int>(random() % 4);
            if (srqn == kLive && kind != 3) live_sent.push_back(text);
            if (kind == 0 && q.ready()) {
                send_kept(q, srqn, text);
            } else if (kind == 1 && q.ready()) {
                char scratch[16];
                SendOp op;
                prepare(op, srqn, scratch, text, IBV_SEND_INLINE);
                ASSERT_EQ(q.try_post_copy(op), 0);
                std::memset(scratch, '?', sizeof(scratch));
            } else if (kind == 3) {
                // An idempotent report nobody owns: may be lost, never counted.
                if (q.ready()) {
                    char scratch[16];
                    SendOp op;
                    prepare(op, kLive + 1, scratch, "report", IBV_SEND_INLINE);
                    ASSERT_EQ(q.try_post(op), 0);
                }
            } else {
                // No credit, or an owned send: a fragment, queued if need be (sendi hands ob1 a descriptor).
                Owned &o = owned.emplace_back();
                o.op.on_complete = called;
                prepare(o.op, srqn, o.bytes, text, 0);
                ASSERT_EQ(q.post_or_queue(o.op), 0);
            }
            const int event = static_cast<int>(random() % 6);
            if (!q.is_open()) {
                // The dead rank's queued sends are dropped, then the connection is made again.
                q.drop_pending_if([](const SendOp &op) { return op.wr.qp_type.xrc.remote_srqn == kDead; },
                                  IBV_WC_REM_ABORT_ERR);
                qps.emplace_back(static_cast<std::uint32_t>(qps.size() + 1));
                first_of_qp = acked = g_wire.size();
                q.open(&qps.back().qp);
                continue;
            }
            if (event == 0) {
                // The newest signaled request of the QP completes: everything up to it was executed.
                for (std::size_t i = g_wire.size(); i > acked; --i)
                    if (g_wire[i - 1].flags & IBV_SEND_SIGNALED) {
                        arrive(acked, i);
                        acked = i;
                        q.on_completion(completion_of(g_wire[i - 1], IBV_WC_SUCCESS));
                        break;
                    }
            } else if (event == 1) {
                // The oldest request to the dead rank not yet executed is refused.
                for (std::size_t i = acked; i < g_wire.size(); ++i)
                    if (g_wire[i].srqn == kDead) {
                        arrive(acked, i);
                        ASSERT_TRUE(q.would_requeue(completion_of(g_wire[i], IBV_WC_REM_INV_REQ_ERR)));
                        q.on_completion(completion_of(g_wire[i], IBV_WC_REM_INV_REQ_ERR));
                        acked = g_wire.size();  // the QP is left: nothing more of it arrives
                        ++refusals;
                        break;
                    }
            }
        }
        if (!q.is_open()) {
            q.drop_pending_if([](const SendOp &op) { return op.wr.qp_type.xrc.remote_srqn == kDead; },
                              IBV_WC_REM_ABORT_ERR);
            qps.emplace_back(static_cast<std::uint32_t>(qps.size() + 1));
            first_of_qp = acked = g_wire.size();
            q.open(&qps.back().qp);
        }
        // The last connection executes everything: completions retire what it holds, and what was queued goes out.
        for (;;) {
            std::size_t signaled = 0;
            for (std::size_t i = g_wire.size(); i > acked && signaled == 0; --i)
                if (g_wire[i - 1].flags & IBV_SEND_SIGNALED) signaled = i;
            if (signaled == 0) break;
            arrive(acked, signaled);
            acked = signaled;
            q.on_completion(completion_of(g_wire[signaled - 1], IBV_WC_SUCCESS));
        }
        arrive(acked, g_wire.size());
        EXPECT_FALSE(q.has_pending());
        (void)first_of_qp;
        // Every owned send was called back at most once.
        for (const Owned &o : owned) {
            std::size_t calls = 0;
            for (const auto &call : g_calls) calls += call.first == &o.op;
            ASSERT_LE(calls, 1u);
        }
        ASSERT_EQ(arrived, live_sent) << "round " << round << " depth " << depth << " interval " << interval
                                      << " refusals " << refusals;
        ASSERT_FALSE(q.broken());
    }
}

namespace {

// What a timeout handed back: the op, its status, the connection it names, and the copy's bytes when it was called.
struct HandedBack {
    SendOp *op;
    ibv_wc_status status;
    SourceKey posted_on;
    std::string bytes;
};
std::vector<HandedBack> g_handed;
void handed_back(SendOp *op, ibv_wc_status status) noexcept {
    const KeptSend &kept = kept_send_of(*op);
    g_handed.push_back(
        {op, status, op->posted_on, std::string(reinterpret_cast<const char *>(kept.data), kept.length)});
}
void owned_back(SendOp *op, ibv_wc_status status) noexcept {
    g_handed.push_back({op, status, op->posted_on, "owned"});
}

// send_kept() riding outages: the copy names its callback and length, as sendi notes them.
void send_kept_riding(SendQueue &q, const std::string &text) {
    KeptSend &kept = q.next_kept();
    kept.op.on_complete = handed_back;
    kept.length = static_cast<std::uint32_t>(text.size());
    send_kept(q, kLive, text);
}

}  // namespace

// Riding outages on one rail, sendi's inline sends are kept copies with a callback: a timeout hands each copy that may
// not have been delivered back to it, in order with the owned sends, naming the connection it was posted on, with its
// bytes still in the copy; those acknowledged before the timed-out one, and a copy without a callback (a report),
// call nobody; the queue is closed, not broken, and nothing is sent again by the queue itself.
TEST(SendQueueCopies, ATimeoutHandsKeptCopiesBackToTheirCallbackInOrderWithOwnedSends) {
    Qp first(5);
    SendQueue q(16, 8, 0);
    q.ride_outages();
    q.keep_copies(32);
    q.open(&first.qp, 9);
    g_wire.clear();
    g_handed.clear();
    char owned_bytes[8];
    SendOp owned;
    owned.on_complete = owned_back;
    send_kept_riding(q, "acked");
    send_kept_riding(q, "timed-out");
    q.next_kept().op.on_complete = nullptr;  // a copy nobody sends again
    send_kept(q, kLive, "report");
    prepare(owned, kLive, owned_bytes, "c", 0);
    ASSERT_EQ(q.post_or_queue(owned), 0);
    send_kept_riding(q, "after");
    ASSERT_EQ(g_wire.size(), 5u);
    EXPECT_FALSE(g_wire[1].flags & IBV_SEND_SIGNALED);  // copies stay unsignaled riding outages too
    const ibv_wc timeout = completion_of(g_wire[1], IBV_WC_RETRY_EXC_ERR);
    ASSERT_TRUE(q.would_requeue(timeout));
    EXPECT_EQ(q.on_completion(timeout), IBV_WC_RETRY_EXC_ERR);
    EXPECT_FALSE(q.broken());
    EXPECT_FALSE(q.is_open());
    EXPECT_EQ(q.outstanding(), 0u);
    ASSERT_EQ(g_handed.size(), 3u);
    EXPECT_EQ(g_handed[0].bytes, "timed-out");
    EXPECT_EQ(g_handed[1].op, &owned);
    EXPECT_EQ(g_handed[2].bytes, "after");
    for (const HandedBack &h : g_handed) {
        EXPECT_EQ(h.status, IBV_WC_RETRY_EXC_ERR);
        EXPECT_EQ(h.posted_on, source_key(9, 5));
    }
    Qp second(6);
    q.open(&second.qp, 10);
    EXPECT_EQ(g_wire.size(), 5u);  // the callbacks send again, the queue does not
}
