// SPDX-License-Identifier: BSD-3-Clause
// The send side of one XRC INI QP (one per remote node, and one for on-node peers through the HCA's loopback):
// credits, selective signaling, and a queue of sends that cannot go out yet. No allocation, lock or syscall on
// this path: operations are caller-owned SendOp records (embedded in BTL fragments) or, for inline sends under
// ULFM, copies the queue keeps per ring slot (keep_copies); the ring and the copies are sized at creation.
//
// The queue outlives its QPs: it starts closed (no QP), is opened when its connection is ready, stopped while a
// connection is drained before it closes, and opened again on another QP later. While it is closed or stopped,
// sends queue in order behind a marker at the head of the queue, so the fast path needs no test of its own
// (has room = credits and nothing queued), and the first send that queues calls the owner's "blocked" hook, which
// starts the connection.
//
// Selective signaling: a work request is signaled when its owner needs to hear of it (a callback), every
// `signal_interval` requests, and whenever the credits left would fall below the interval, so the ring can never
// fill up with requests whose completion nobody will report. A signaled completion retires every request
// posted before it on the same QP (completions are in order per QP).
#pragma once

#include "replay_filter.h"

#include <infiniband/verbs.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace xrc {

struct SendOp;
// status: IBV_WC_SUCCESS or the failing work completion's status.
using SendCompletionFn = void (*)(SendOp *op, ibv_wc_status status) noexcept;

class SendQueue;

// A send work request's id names its queue and its ring slot: the queue's address in the low 48 bits (Linux
// user-space addresses on x86-64 and aarch64 fit), the slot (below 65536: the depth is capped there) above. So an
// error completion names exactly the request that failed, even when the requests before it were unsignaled and
// produced no completion of their own. Bits 0 and 1 stay clear: they tell a send from the completions of other kinds
// (completion_kind.h).
inline constexpr unsigned kSendWrIdSlotShift = 48;
inline SendQueue *send_queue_of(std::uint64_t wr_id) noexcept {
    return reinterpret_cast<SendQueue *>(wr_id & ((std::uint64_t{1} << kSendWrIdSlotShift) - 1));
}

struct SendOp {
    enum class Unfilled { tag };

    SendOp() noexcept
        : wr{}, sge{}, next_pending(nullptr), replay_seq(0), replay_stream(ReplayStream::fresh), posted_on(0) {}
    // Work request and scatter entry left as they are: for a temporary that Peer::prepare_ring or prepare_srq fills
    // in whole (every field a post reads), an inline send's, so that the send path does not zero them first. Nor is
    // the queue link set: such an op is posted at once or not at all, never queued.
    explicit SendOp(Unfilled) noexcept {}

    ibv_send_wr wr;  // prepared by the owner: opcode, sg_list, send_flags, remote_srqn, rdma/atomic fields
    ibv_sge sge;
    SendCompletionFn on_complete = nullptr;  // null: nobody waits for this operation (inline send)
    SendOp *next_pending;                    // the queue's link (set by the default constructor)
    // A send kept for replay with several rails (replay_filter.h): its place in its stream, set when it is numbered
    // (left as they are by the Unfilled constructor: an inline send is never kept).
    std::uint32_t replay_seq;
    ReplayStream replay_stream;
    // Set by the queue just before it completes the op with an error: the connection it was posted on, 0 when it
    // never reached a QP. Read only by a failed op's callback, so the data path never writes it.
    SourceKey posted_on;
};

// A small message a queue keeps (SendQueue::keep_copies): the work request and the bytes of an inline send nobody
// owns, in the ring slot of the request it went out as, until that request is retired. The op points at `data`.
// Its callback is null (a copy a refusal sends again as itself), or, on a queue that rides outages, what a timeout
// hands the copy back to (hand_back_after), which sends the message again from what its sender noted here.
struct KeptSend {
    SendOp op;
    unsigned char *data = nullptr;  // this slot's part of the queue's block (SendQueue::kept_bytes())
    std::uint32_t slot = 0;         // its index in the ring: the post needs no division to find it
    // Noted by a sender whose copies may be handed back: whose message it is, its length without what the wire
    // adds (an eager ring's footer) and its tag.
    void *owner = nullptr;
    std::uint32_t length = 0;
    std::uint8_t tag = 0;
};
static_assert(offsetof(KeptSend, op) == 0);
// The kept copy a handed-back op is (its callback was given a KeptSend's op).
inline KeptSend &kept_send_of(SendOp &op) noexcept {
    return *reinterpret_cast<KeptSend *>(&op);
}

// `op` as a fence: a signaled zero-length SEND_WITH_IMM carrying the no-op marker to `remote_srqn` (any SRQ of
// the peer: the receiver drops it). Its completion says every send posted before it on the queue has completed,
// unsignaled ones included, so the queue can be closed.
void make_fence(SendOp &op, std::uint32_t remote_srqn, SendCompletionFn on_complete) noexcept;
// `op` is such a fence.
bool is_fence(const SendOp &op) noexcept;

class SendQueue {
public:
    using BlockedFn = void (*)(void *owner) noexcept;

    // Closed until open(); `blocked` (may be null) is called when a send queues while the queue is not open.
    SendQueue(std::uint32_t depth, std::uint32_t signal_interval, std::uint32_t node, BlockedFn blocked = nullptr,
              void *owner = nullptr);
    SendQueue(const SendQueue &) = delete;
    SendQueue &operator=(const SendQueue &) = delete;

    ibv_qp *qp() const noexcept { return qp_; }
    std::uint32_t node() const noexcept { return node_; }
    bool broken() const noexcept { return broken_; }
    bool is_open() const noexcept { return open_; }
    std::uint32_t credits() const noexcept { return depth_ - outstanding(); }
    // Work requests posted and not yet retired.
    std::uint32_t outstanding() const noexcept { return tail_ - head_; }
    // True when a send would go out now: credit, open, and nothing queued before it (order is kept).
    bool can_post() const noexcept { return credits() > 0 && pending_head_ == nullptr; }
    // can_post(), and the queue is not broken: try_post() would post.
    bool ready() const noexcept { return !broken_ && can_post(); }
    std::uint32_t outstanding_callbacks() const noexcept { return outstanding_callbacks_; }
    // Sends queued (not counting the marker of a closed queue).
    bool has_pending() const noexcept {
        return (pending_head_ == &closed_marker_ ? closed_marker_.next_pending : pending_head_) != nullptr;
    }
    // Nothing posted is still outstanding on the QP.
    bool idle() const noexcept { return head_ == tail_; }
    // Outstanding requests that only a later signaled one can retire: a fence must be posted before closing.
    bool needs_fence() const noexcept { return head_ != tail_ && since_signal_ > 0; }
    // Work requests posted since the queue was made (a mark for retired()).
    std::uint32_t posted() const noexcept { return tail_; }
    // Every request posted before `mark` (a posted() value) has been retired.
    bool retired(std::uint32_t mark) const noexcept { return static_cast<std::int32_t>(head_ - mark) >= 0; }
    // From now until detach(), every post is signaled: nothing posted later needs a fence to be retired (the
    // connection manager's answer to LEAVING, whose creator's SRQ is gone once it left). The one member another
    // thread may write (the one serving datagrams): a relaxed store, read by the post as the interval always was.
    void signal_every_post() noexcept { signal_interval_.store(1, std::memory_order_relaxed); }
    // Set by every post; the connection manager's eviction clock clears it (least recently used first).
    bool used() const noexcept { return used_; }
    void clear_used() noexcept { used_ = false; }

    // Posts now, or returns EAGAIN when it cannot go out now (nothing queued), or the post's errno. The op must
    // stay valid until its completion if it has on_complete; otherwise (inline sends) it may be a temporary.
    // Inline with the post itself: it is the send path's one call per message, made from the BTL's send functions.
    [[gnu::always_inline]] int try_post(SendOp &op) noexcept {
        if (broken_) return EPIPE;
        if (!can_post()) return EAGAIN;  // keeps order behind queued sends, and waits while not open
        return post_now(op);
    }
    // try_post() for a caller that has seen ready() and posted or queued nothing on this queue since (sendi, which
    // checks before it assembles the message): 0 or the post's errno.
    [[gnu::always_inline]] int post_ready(SendOp &op) noexcept { return post_now(op); }
    // Posts now or queues until it can go out (the op must stay valid). 0, or an errno if the queue is broken.
    int post_or_queue(SendOp &op) noexcept;

    // The connection is ready on `qp`, which reaches the TGT QP `tgt_qpn` (0: not told; what a failed op then
    // names as its connection has no TGT QP number): queued sends go out. Out of memory for the copies it is to keep
    // (keep_copies, the first time), the queue fails instead (fail(IBV_WC_GENERAL_ERR)).
    void open(ibv_qp *qp, std::uint32_t tgt_qpn = 0) noexcept;
    // No new posts (they queue); what was posted still completes. Idempotent.
    void stop() noexcept;
    // Posts `op` (signaled) even though the queue is stopped: the fence that retires unsignaled requests before
    // the QP is closed. 0, EAGAIN without credit (then the outstanding ones include a signaled one), or an errno.
    int post_fence(SendOp &op) noexcept;
    // The responder is gone (its TGT QP's creator left): outstanding requests that only a fence could retire, and
    // that nobody waits for (unsignaled, so without a callback), are taken as done. Those behind a signaled one
    // wait for its completion first.
    void forget_unsignaled() noexcept;
    // The QP is going away (idle() must hold): the queue is closed until the next open(), and signals every
    // `signal_interval` posts again.
    void detach() noexcept;
    // The QP is going away with requests outstanding that can never complete (their responder is gone, and what
    // they carried was for processes that died): each completes with `status` now (its owner is called), and the
    // queue is detached: what is queued waits for the next open().
    void abort_outstanding(ibv_wc_status status) noexcept;

    // A completion of this QP. Returns the failing status on the first error, IBV_WC_SUCCESS otherwise. On an error
    // the queue is broken and every outstanding and queued op has been completed with that status, except for a
    // refusal that requeue_refused() allows and requeue_after() could take: the queue is then closed, not broken.
    // A completion of a QP the queue no longer posts to (the flush of one it left) is ignored.
    ibv_wc_status on_completion(const ibv_wc &wc) noexcept;
    // From now on a request the responder refused (REM_INV_REQ, REM_ACCESS_ERR, REM_OP_ERR: the SRQ, memory or
    // receive buffer it names is gone, its owner having died) costs only that request: see requeue_after(). For a queue
    // whose every posted message is kept until its completion, by its owner or as a copy (keep_copies()): any other op
    // without a callback cannot be sent again, so only idempotent reports whose loss the next one makes good may be
    // posted so (the eager rings' credit reports: a writer that hears of no room falls back to the SRQs, and the next
    // report or piggybacked count catches up).
    void requeue_refused() noexcept { requeue_refused_ = true; }
    // An inline send nobody owns goes out from a copy the queue keeps in the ring slot of its request (next_kept()
    // and post_kept(), or try_post_copy()) until that request is retired, while it stays inline and unsignaled: with
    // requeue_refused(), a refusal sends it again like an owned op; riding outages, a timeout hands it back to its
    // callback, when its sender gave it one (KeptSend). `bytes` (the largest inline send) per slot, `depth` slots,
    // allocated at the first open(): a link is made for every node of the job, a connection only where traffic
    // goes, so that the copies grow with the nodes a process talks to, not with the job.
    void keep_copies(std::uint32_t bytes) noexcept;
    // Whether the queue keeps copies (once open).
    bool keeps_copies() const noexcept { return kept_bytes_ != 0; }
    std::uint32_t kept_bytes() const noexcept { return kept_bytes_; }
    // The memory the copies hold: 0 until the first open().
    std::size_t kept_memory() const noexcept {
        return kept_ != nullptr ? std::size_t{depth_} * (sizeof(KeptSend) + kept_bytes_) : 0;
    }
    // The copy the next post takes (keeps_copies() must hold: not tested here, the sender is chosen for such
    // queues), for a sender that has seen ready() and posts nothing else on this queue before post_kept(): it
    // assembles its message into `data` (kept_bytes() at most) and prepares `op` in place, inline and without a
    // callback, so the message is copied nowhere.
    [[gnu::always_inline]] KeptSend &next_kept() noexcept { return kept_[tail_ % depth_]; }
    // post_ready() of the copy next_kept() gave, prepared since: 0 or the post's errno.
    [[gnu::always_inline]] int post_kept(KeptSend &kept) noexcept { return post_now<true>(kept.op, kept.slot); }
    // try_post() of an inline op without a callback whose data its caller reuses at once (a fragment going back
    // to its list): with keep_copies() and requeue_refused(), the op and its data are copied into the slot its
    // request takes and posted from there; EAGAIN also when its data does not fit a copy. Otherwise try_post().
    int try_post_copy(SendOp &op) noexcept;
    // From now on a request the HCA gave up on (RETRY_EXC_ERR: nobody acknowledged it within the retry budget, the
    // port or the path having been down that long) does not break the queue: see hand_back_after(). For a queue
    // whose owners keep every message until its completion and can send it again, numbered, for the receiver to
    // drop what it had (replay_filter.h). `on` false: such a request breaks the queue again (its owners send what
    // it held over another rail); decided before the queue takes the error (port_progress.h: send_failed).
    void ride_outages(bool on = true) noexcept { ride_outages_ = on; }
    // The error completion `wc` is one this queue will take without breaking: a refusal it requeues after
    // (requeue_after) or a timeout it hands back after (hand_back_after). The queue is then closed, and its owner
    // connects again.
    bool would_requeue(const ibv_wc &wc) const noexcept;
    // The completion `wc` is of a QP this queue no longer posts to (it left it after a refusal or a timeout, or
    // broke on it and was reset).
    bool stale(const ibv_wc &wc) const noexcept {
        return (requeue_refused_ || ride_outages_ || reset_) && (qp_ == nullptr || wc.qp_num != qp_->qp_num);
    }
    // A broken queue whose rail came back: every op it had completed when it broke, so it starts again, closed
    // (not broken), for its next connection. Nothing for a queue that is not broken.
    void reset() noexcept;
    // The connection could not be made: every queued op completes with `status`, and the queue is broken.
    void fail(ibv_wc_status status) noexcept;
    // Whether every queued op satisfies `pred` (true when none is queued).
    template <class Pred>
    bool all_pending(Pred pred) const noexcept {
        for (const SendOp *op = pending_head_; op != nullptr; op = op->next_pending)
            if (op != &closed_marker_ && !pred(*op)) return false;
        return true;
    }
    // Every queued op (not what is posted) for which `pred` holds completes with `status`, after all of them were
    // taken off the queue (an owner called back may send again); the others stay queued, in order, and the queue
    // stays as it was, open or not. Returns how many were dropped.
    template <class Pred>
    std::size_t drop_pending_if(Pred pred, ibv_wc_status status) noexcept {
        SendOp *dropped = nullptr, **dropped_tail = &dropped, *kept_last = nullptr;
        for (SendOp **link = &pending_head_; *link != nullptr;) {
            SendOp *op = *link;
            if (op == &closed_marker_ || !pred(*op)) {
                kept_last = op;
                link = &op->next_pending;
                continue;
            }
            *link = op->next_pending;
            op->next_pending = nullptr;
            *dropped_tail = op;
            dropped_tail = &op->next_pending;
        }
        pending_tail_ = kept_last;
        return complete_chain(dropped, 0, status);
    }
    std::size_t drop_pending(ibv_wc_status status) noexcept {
        return drop_pending_if([](const SendOp &) { return true; }, status);
    }

    // The operation an error completion of this QP names, to be asked before on_completion completes it: null
    // when that request had no owner (an inline send, a fragment nobody waits for), or is no longer outstanding.
    const SendOp *failed_op(const ibv_wc &wc) const noexcept;
    // The same for a request that went out from a kept copy (keep_copies()): its work request says where it went
    // (remote_srqn). Null otherwise.
    const SendOp *failed_copy(const ibv_wc &wc) const noexcept;

private:
    // flags: kSignaled, kKept (the request went out from kept_[slot], whatever op says).
    static constexpr std::uint8_t kSignaled = 1;
    static constexpr std::uint8_t kKept = 2;
    struct Slot {
        SendOp *op;
        std::uint8_t flags;
    };
    // The position behind the oldest outstanding request of the ring slot a work request id names; depth_ or more
    // for a slot beyond the ring.
    std::uint32_t age_of(std::uint64_t wr_id) const noexcept {
        const auto slot = static_cast<std::uint32_t>(wr_id >> kSendWrIdSlotShift);
        return slot < depth_ ? (slot + depth_ - head_ % depth_) % depth_ : depth_;
    }
    // kept: `op` is the copy kept_[kept_slot].op, without a callback, and kept_slot is tail_ % depth_.
    template <bool kept = false>
    [[gnu::always_inline]] int post_now(SendOp &op, std::uint32_t kept_slot = 0) noexcept {
        const bool wants_callback = !kept && op.on_complete != nullptr;
        const std::uint32_t interval = signal_interval_.load(std::memory_order_relaxed);
        const bool signal = wants_callback || since_signal_ + 1 >= interval || credits() <= interval;
        if (signal)
            op.wr.send_flags |= IBV_SEND_SIGNALED;
        else
            op.wr.send_flags &= ~static_cast<unsigned>(IBV_SEND_SIGNALED);
        const std::uint32_t slot = kept ? kept_slot : tail_ % depth_;
        op.wr.wr_id = reinterpret_cast<std::uintptr_t>(this) | std::uint64_t{slot} << kSendWrIdSlotShift;
        op.wr.next = nullptr;
        ibv_send_wr *bad;  // set by a failing post, and not read: one request is posted
        const int rc = ibv_post_send(qp_, &op.wr, &bad);
        if (rc != 0) return rc;
        ring_[slot] = Slot{wants_callback ? &op : nullptr,
                           static_cast<std::uint8_t>((signal ? kSignaled : 0) | (kept ? kKept : 0))};
        ++tail_;
        since_signal_ = signal ? 0 : since_signal_ + 1;
        if (wants_callback) ++outstanding_callbacks_;
        used_ = true;
        return 0;
    }
    void enqueue(SendOp &op) noexcept;
    // The copies keep_copies() asked for, made once: false when there is no memory for them.
    bool make_copies() noexcept;
    void drain_pending() noexcept;
    // The copy `op` is, if it is one of kept_ (a requeued copy waiting in the queue), else null.
    KeptSend *kept_of(SendOp *op) const noexcept;
    // Posts the copy `from` (prepared, no callback) from the slot its request takes, copied there first if it is
    // another one. 0 or the post's errno.
    int post_copy_now(const SendOp &from) noexcept;
    // The op the outstanding request in ring slot `slot` went out from: its owner's, its kept copy, or null.
    SendOp *op_in(std::uint32_t slot) const noexcept {
        const Slot &s = ring_[slot];
        return s.op != nullptr ? s.op : (s.flags & kKept) != 0 ? &kept_[slot].op : nullptr;
    }
    // A refusal: on a reliable connection the responder executed, in order, every request before the refused one
    // (it acknowledged them, the refusal's NAK says so) and none after it (its QP went to the error state with the
    // refusal). So the older ones complete as done, the refused one with `wc.status`, and the newer ones, flushed
    // by the HCA without reaching anyone, go back to the head of the queue, in order, for the next connection: the
    // queue is closed, as after detach() (its owner makes the next connection), and nothing is delivered twice or
    // lost. False (nothing changed) when the refused request is not outstanding. A newer request without an owner or
    // a kept copy is not sent again; a kept copy goes back to the queue as itself, and out again from the slot its
    // new request takes.
    bool requeue_after(const ibv_wc &wc) noexcept;
    // A timeout (ride_outages): on a reliable connection the HCA fails the oldest request nobody acknowledged, so
    // every request before it was delivered and completes as done; the failed one and every newer one may or may
    // not have reached the responder (only the acknowledgements may have been lost), so each goes back to its owner
    // (a kept copy to its callback, if it has one) with `wc.status` and the connection it was posted on
    // (posted_on), and the owner sends a copy, numbered, that the receiver drops if it had the original. What was
    // queued and never posted goes back too (posted_on 0: fresh), so that every copy is prepared anew, in the original
    // order, for the next connection. The queue is closed (not broken) before anyone is called: a copy sent from a
    // callback queues for the next connection.
    bool hand_back_after(const ibv_wc &wc) noexcept;
    void fail_all(ibv_wc_status status) noexcept;
    // Every outstanding request completes with `status`, oldest first (their owners are called).
    void complete_outstanding(ibv_wc_status status) noexcept;
    // Completes every op of `chain` (linked through next_pending, already off the queue), in order, with `status`,
    // each stamped as posted on `connection` first (0: never reached a QP); an op nobody owns is skipped. Returns
    // how many the chain held.
    static std::size_t complete_chain(SendOp *chain, SourceKey connection, ibv_wc_status status) noexcept;

    ibv_qp *qp_ = nullptr;
    SourceKey connection_ = 0;  // what the ops posted on qp_ name as their connection when they fail
    std::uint32_t depth_;
    std::atomic<std::uint32_t> signal_interval_;
    std::uint32_t base_signal_interval_;
    std::uint32_t node_;
    BlockedFn blocked_;
    void *owner_;
    std::vector<Slot> ring_;
    std::uint32_t head_ = 0;  // oldest outstanding
    std::uint32_t tail_ = 0;  // next free
    std::uint32_t since_signal_ = 0;
    std::uint32_t outstanding_callbacks_ = 0;
    // keep_copies(): one copy per ring slot (kept_ is kept_store_'s, null until the first open), their bytes in
    // kept_block_, kept_bytes_ each.
    std::vector<KeptSend> kept_store_;
    std::unique_ptr<unsigned char[]> kept_block_;
    KeptSend *kept_ = nullptr;
    std::uint32_t kept_bytes_ = 0;
    SendOp closed_marker_;  // at the head of the pending list while the queue is not open
    SendOp *pending_head_ = nullptr;
    SendOp *pending_tail_ = nullptr;
    bool open_ = false;
    bool broken_ = false;
    bool used_ = false;
    bool requeue_refused_ = false;
    bool ride_outages_ = false;
    bool reset_ = false;  // broke once and was reset: the QP it left may still complete (stale)
};

}  // namespace xrc
