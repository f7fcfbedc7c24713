// SPDX-License-Identifier: BSD-3-Clause
#include "send_queue.h"

#include "wire_format.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace xrc {

void make_fence(SendOp &op, std::uint32_t remote_srqn, SendCompletionFn on_complete) noexcept {
    op = SendOp{};
    op.wr.opcode = IBV_WR_SEND_WITH_IMM;
    op.wr.imm_data = htonl(kImmMarker | kImmNop);
    op.wr.qp_type.xrc.remote_srqn = remote_srqn;
    op.on_complete = on_complete;
}

SendQueue::SendQueue(std::uint32_t depth, std::uint32_t signal_interval, std::uint32_t node, BlockedFn blocked,
                     void *owner)
    : depth_(depth),
      signal_interval_(signal_interval == 0 ? 1 : signal_interval),
      base_signal_interval_(signal_interval_.load(std::memory_order_relaxed)),
      node_(node),
      blocked_(blocked),
      owner_(owner),
      ring_(depth),
      pending_head_(&closed_marker_),
      pending_tail_(&closed_marker_) {}

bool is_fence(const SendOp &op) noexcept {
    return op.wr.opcode == IBV_WR_SEND_WITH_IMM && op.wr.imm_data == htonl(kImmMarker | kImmNop) && op.wr.num_sge == 0;
}

void SendQueue::keep_copies(std::uint32_t bytes) noexcept {
    if (kept_ != nullptr || bytes == 0) return;
    // Whole cache lines per slot: a message assembled in one never shares a line with its neighbour's.
    kept_bytes_ = (bytes + 63) / 64 * 64;
}

bool SendQueue::make_copies() noexcept {
    if (kept_bytes_ == 0 || kept_ != nullptr) return true;
    try {
        std::vector<KeptSend> store(depth_);
        auto block = std::make_unique<unsigned char[]>(std::size_t{kept_bytes_} * depth_);
        for (std::uint32_t i = 0; i < depth_; ++i) {
            KeptSend &k = store[i];
            k.data = block.get() + std::size_t{kept_bytes_} * i;
            k.op.sge.addr = reinterpret_cast<std::uintptr_t>(k.data);
            k.op.wr.sg_list = &k.op.sge;
            k.op.wr.num_sge = 1;
            k.slot = i;
        }
        kept_store_ = std::move(store);  // moving a vector keeps its elements where they are
        kept_block_ = std::move(block);
    } catch (const std::bad_alloc &) {
        return false;
    }
    kept_ = kept_store_.data();
    return true;
}

int SendQueue::try_post_copy(SendOp &op) noexcept {
    if (kept_ == nullptr || !requeue_refused_) return try_post(op);  // nothing would send it again
    if (broken_) return EPIPE;
    if (!can_post() || op.sge.length > kept_bytes_) return EAGAIN;
    return post_copy_now(op);
}

KeptSend *SendQueue::kept_of(SendOp *op) const noexcept {
    if (kept_ == nullptr) return nullptr;
    // Compared as addresses: `op` may be any caller's.
    const auto at = reinterpret_cast<std::uintptr_t>(op), first = reinterpret_cast<std::uintptr_t>(kept_);
    if (at < first || at >= first + sizeof(KeptSend) * depth_ || (at - first) % sizeof(KeptSend) != 0) return nullptr;
    return &kept_[(at - first) / sizeof(KeptSend)];
}

int SendQueue::post_copy_now(const SendOp &from) noexcept {
    KeptSend &to = kept_[tail_ % depth_];
    if (&to.op != &from) {
        // Another slot's copy (requeued, its slot now taken by an older one: requeue_after says why none that waits
        // behind it is overwritten) or a caller's op: the request and the bytes move here.
        to.op.wr = from.wr;
        to.op.wr.sg_list = &to.op.sge;
        to.op.wr.num_sge = 1;
        to.op.sge = from.sge;
        to.op.sge.addr = reinterpret_cast<std::uintptr_t>(to.data);
        std::memcpy(to.data, reinterpret_cast<const void *>(from.sge.addr), from.sge.length);
        to.op.on_complete = nullptr;
    }
    return post_now<true>(to.op, to.slot);
}

void SendQueue::enqueue(SendOp &op) noexcept {
    op.next_pending = nullptr;
    if (pending_tail_ != nullptr)
        pending_tail_->next_pending = &op;
    else
        pending_head_ = &op;
    pending_tail_ = &op;
}

int SendQueue::post_or_queue(SendOp &op) noexcept {
    if (broken_) return EPIPE;
    if (can_post()) return post_now(op);
    enqueue(op);
    if (!open_ && blocked_ != nullptr) blocked_(owner_);
    return 0;
}

void SendQueue::open(ibv_qp *qp, std::uint32_t tgt_qpn) noexcept {
    if (broken_) return;
    if (!make_copies()) {  // a sender that keeps copies would have none to assemble into
        fail(IBV_WC_GENERAL_ERR);
        return;
    }
    qp_ = qp;
    connection_ = source_key(tgt_qpn, qp->qp_num);
    open_ = true;
    if (pending_head_ == &closed_marker_) {
        pending_head_ = closed_marker_.next_pending;
        if (pending_head_ == nullptr) pending_tail_ = nullptr;
        closed_marker_.next_pending = nullptr;
    }
    drain_pending();
}

void SendQueue::stop() noexcept {
    open_ = false;
    if (pending_head_ == &closed_marker_) return;
    closed_marker_.next_pending = pending_head_;
    if (pending_head_ == nullptr) pending_tail_ = &closed_marker_;
    pending_head_ = &closed_marker_;
}

int SendQueue::post_fence(SendOp &op) noexcept {
    if (broken_) return EPIPE;
    if (credits() == 0) return EAGAIN;
    return post_now(op);
}

void SendQueue::forget_unsignaled() noexcept {
    if (since_signal_ == 0 || since_signal_ != outstanding()) return;
    head_ = tail_;
    since_signal_ = 0;
}

void SendQueue::detach() noexcept {
    stop();
    qp_ = nullptr;
    since_signal_ = 0;
    signal_interval_.store(base_signal_interval_, std::memory_order_relaxed);
}

void SendQueue::abort_outstanding(ibv_wc_status status) noexcept {
    stop();
    complete_outstanding(status);
    detach();
}

void SendQueue::complete_outstanding(ibv_wc_status status) noexcept {
    while (head_ != tail_) {
        const Slot slot = ring_[head_ % depth_];
        ++head_;
        if (slot.op != nullptr) {
            --outstanding_callbacks_;
            slot.op->posted_on = connection_;
            slot.op->on_complete(slot.op, status);
        }
    }
}

void SendQueue::drain_pending() noexcept {
    while (pending_head_ != nullptr && pending_head_ != &closed_marker_ && credits() > 0) {
        SendOp *op = pending_head_;
        pending_head_ = op->next_pending;
        if (pending_head_ == nullptr) pending_tail_ = nullptr;
        if ((kept_of(op) != nullptr ? post_copy_now(*op) : post_now(*op)) != 0) {
            broken_ = true;
            op->posted_on = 0;
            if (op->on_complete != nullptr) op->on_complete(op, IBV_WC_GENERAL_ERR);
            fail_all(IBV_WC_GENERAL_ERR);
            return;
        }
    }
}

void SendQueue::fail_all(ibv_wc_status status) noexcept {
    complete_outstanding(status);
    SendOp *op = pending_head_;
    pending_head_ = pending_tail_ = nullptr;
    while (op != nullptr) {
        SendOp *next = op->next_pending;
        if (op == &closed_marker_)
            closed_marker_.next_pending = nullptr;
        else if (op->on_complete != nullptr) {
            op->posted_on = 0;
            op->on_complete(op, status);
        }
        op = next;
    }
}

std::size_t SendQueue::complete_chain(SendOp *chain, SourceKey connection, ibv_wc_status status) noexcept {
    std::size_t count = 0;
    while (chain != nullptr) {
        SendOp *next = chain->next_pending;
        chain->next_pending = nullptr;
        if (chain->on_complete != nullptr) {
            chain->posted_on = connection;
            chain->on_complete(chain, status);
        }
        ++count;
        chain = next;
    }
    return count;
}

void SendQueue::fail(ibv_wc_status status) noexcept {
    if (broken_) return;
    broken_ = true;
    open_ = false;
    fail_all(status);
}

void SendQueue::reset() noexcept {
    if (!broken_) return;
    broken_ = false;
    reset_ = true;
    head_ = tail_;  // fail_all() completed every one of them already
    outstanding_callbacks_ = 0;
    pending_head_ = pending_tail_ = nullptr;
    closed_marker_.next_pending = nullptr;
    detach();
}

const SendOp *SendQueue::failed_op(const ibv_wc &wc) const noexcept {
    const std::uint32_t age = age_of(wc.wr_id);
    return age < outstanding() ? ring_[static_cast<std::uint32_t>(wc.wr_id >> kSendWrIdSlotShift)].op : nullptr;
}

const SendOp *SendQueue::failed_copy(const ibv_wc &wc) const noexcept {
    if (age_of(wc.wr_id) >= outstanding()) return nullptr;
    const auto slot = static_cast<std::uint32_t>(wc.wr_id >> kSendWrIdSlotShift);
    return ring_[slot].op == nullptr && (ring_[slot].flags & kKept) != 0 ? &kept_[slot].op : nullptr;
}

namespace {

// The responder refused the request and went to the error state with it: remote invalid request (the SRQ it names
// is gone), remote access (the memory or ring is gone), remote operation error (the SRQ was still there but the
// receive buffer's registration was not: its process was being torn down).
bool is_refusal(ibv_wc_status status) noexcept {
    return status == IBV_WC_REM_INV_REQ_ERR || status == IBV_WC_REM_ACCESS_ERR || status == IBV_WC_REM_OP_ERR;
}

}  // namespace

bool SendQueue::would_requeue(const ibv_wc &wc) const noexcept {
    const bool taken =
        (requeue_refused_ && is_refusal(wc.status)) || (ride_outages_ && wc.status == IBV_WC_RETRY_EXC_ERR);
    if (!taken || broken_ || stale(wc)) return false;
    return age_of(wc.wr_id) < outstanding();
}

bool SendQueue::hand_back_after(const ibv_wc &wc) noexcept {
    if (!ride_outages_ || wc.status != IBV_WC_RETRY_EXC_ERR || !would_requeue(wc)) return false;
    const std::uint32_t age = age_of(wc.wr_id);
    const std::uint32_t count = outstanding();
    // Taken off the ring and the queue first, linked in order: done (acknowledged), then posted and maybe
    // delivered, then never posted. The closed marker (and a marker's chain) stays behind.
    SendOp *done = nullptr, **done_tail = &done;
    SendOp *posted = nullptr, **posted_tail = &posted;
    for (std::uint32_t i = 0; i < count; ++i) {
        // What was done calls only owners; what may not have been delivered calls kept copies' callbacks too.
        const std::uint32_t slot = (head_ + i) % depth_;
        SendOp *op = i < age ? ring_[slot].op : op_in(slot);
        // No owner nor callback (an idempotent report): the next one says as much.
        if (op == nullptr || op->on_complete == nullptr) continue;
        SendOp **&tail = i < age ? done_tail : posted_tail;
        *tail = op;
        tail = &op->next_pending;
    }
    *done_tail = nullptr;
    *posted_tail = nullptr;
    SendOp *queued = pending_head_ == &closed_marker_ ? closed_marker_.next_pending : pending_head_;
    const SourceKey connection = connection_;
    head_ = tail_;
    outstanding_callbacks_ = 0;
    pending_head_ = pending_tail_ = nullptr;
    closed_marker_.next_pending = nullptr;
    detach();  // closed: the marker at the head of an empty queue
    complete_chain(done, 0, IBV_WC_SUCCESS);
    complete_chain(posted, connection, wc.status);
    complete_chain(queued, 0, wc.status);
    return true;
}

bool SendQueue::requeue_after(const ibv_wc &wc) noexcept {
    if (!would_requeue(wc) || !is_refusal(wc.status)) return false;
    const std::uint32_t age = age_of(wc.wr_id);
    const std::uint32_t count = outstanding();
    // The ring is emptied and the queue closed before anyone is called: an owner called back may send again, and
    // that must queue behind the requeued ops, never reach the QP in the error state.
    SendOp *done = nullptr, **done_tail = &done;
    for (std::uint32_t i = 0; i < age; ++i)
        if (SendOp *op = ring_[(head_ + i) % depth_].op; op != nullptr) {
            *done_tail = op;
            done_tail = &op->next_pending;
        }
    *done_tail = nullptr;
    SendOp *refused = ring_[(head_ + age) % depth_].op;
    // The newer ones, owned or kept as copies, in order. A copy stays in its slot until it goes out again: each
    // newer one then takes the next position from the old tail on, and the k-th of them (position tail + k - 1) and
    // every later one (older position p >= head + k + 1, with tail <= head + depth) are less than depth apart, so
    // the slot a copy moves to never holds one still waiting (post_copy_now).
    SendOp *again = nullptr, *again_last = nullptr;
    // A fence among them retired what was posted before it on this QP, which the refusal has done: it is not sent
    // again (its owner may post it anew for the next connection), just completed as flushed.
    SendOp *fences = nullptr, **fences_tail = &fences;
    for (std::uint32_t i = age + 1; i < count; ++i) {
        SendOp *op = op_in((head_ + i) % depth_);
        if (op == nullptr) continue;  // an idempotent report nobody owns: the next one says as much (see the header)
        if (is_fence(*op)) {
            *fences_tail = op;
            fences_tail = &op->next_pending;
            continue;
        }
        op->next_pending = nullptr;
        (again_last != nullptr ? again_last->next_pending : again) = op;
        again_last = op;
    }
    const SourceKey connection = connection_;
    head_ = tail_;
    outstanding_callbacks_ = 0;
    detach();                // the closed marker at the head, before what was queued already
    if (again != nullptr) {  // right behind the marker: they were posted before anything queued
        again_last->next_pending = closed_marker_.next_pending;
        closed_marker_.next_pending = again;
        if (pending_tail_ == &closed_marker_) pending_tail_ = again_last;
    }
    *fences_tail = nullptr;
    complete_chain(done, 0, IBV_WC_SUCCESS);
    if (refused != nullptr) {
        refused->posted_on = connection;
        refused->on_complete(refused, wc.status);
    }
    complete_chain(fences, 0, IBV_WC_WR_FLUSH_ERR);
    return true;
}

ibv_wc_status SendQueue::on_completion(const ibv_wc &wc) noexcept {
    if (broken_) return IBV_WC_SUCCESS;  // flushes after the first error: already reported
    if (wc.status != IBV_WC_SUCCESS) {
        if (stale(wc)) return IBV_WC_SUCCESS;  // the flush of a QP left after a refusal
        if (hand_back_after(wc) || requeue_after(wc)) return wc.status;
        broken_ = true;
        open_ = false;
        fail_all(wc.status);
        return wc.status;
    }
    // Retire everything up to and including the oldest signaled request: the one this completion names
    // (completions are in order per QP). When no outstanding request has a callback, that is one step.
    if (outstanding_callbacks_ == 0) {
        const std::uint32_t age = age_of(wc.wr_id);
        if (age < outstanding() &&
            (ring_[static_cast<std::uint32_t>(wc.wr_id >> kSendWrIdSlotShift)].flags & kSignaled) != 0) {
            head_ += age + 1;
            drain_pending();
            return IBV_WC_SUCCESS;
        }
    }
    while (head_ != tail_) {
        const Slot slot = ring_[head_ % depth_];
        ++head_;
        if (slot.op != nullptr) {
            --outstanding_callbacks_;
            slot.op->on_complete(slot.op, IBV_WC_SUCCESS);
        }
        if ((slot.flags & kSignaled) != 0) break;
    }
    drain_pending();
    return IBV_WC_SUCCESS;
}

}  // namespace xrc
