// SPDX-License-Identifier: BSD-3-Clause
#include "send_queue.h"

#include "wire_format.h"

#include <arpa/inet.h>

#include <cerrno>

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

void SendQueue::drain_pending() noexcept {
    while (pending_head_ != nullptr && pending_head_ != &closed_marker_ && credits() > 0) {
        SendOp *op = pending_head_;
        pending_head_ = op->next_pending;
        if (pending_head_ == nullptr) pending_tail_ = nullptr;
        if (post_now(*op) != 0) {
            broken_ = true;
            op->posted_on = 0;
            if (op->on_complete != nullptr) op->on_complete(op, IBV_WC_GENERAL_ERR);
            fail_all(IBV_WC_GENERAL_ERR);
            return;
        }
    }
}

void SendQueue::fail_all(ibv_wc_status status) noexcept {
    while (head_ != tail_) {
        const Slot slot = ring_[head_ % depth_];
        ++head_;
        if (slot.op != nullptr) {
            --outstanding_callbacks_;
            slot.op->posted_on = connection_;
            slot.op->on_complete(slot.op, status);
        }
    }
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

const SendOp *SendQueue::failed_op(const ibv_wc &wc) const noexcept {
    const std::uint32_t age = age_of(wc.wr_id);
    return age < outstanding() ? ring_[static_cast<std::uint32_t>(wc.wr_id >> kSendWrIdSlotShift)].op : nullptr;
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
        SendOp *op = ring_[(head_ + i) % depth_].op;
        if (op == nullptr) continue;  // no owner (an idempotent report): the next one says as much
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
    SendOp *again = nullptr, *again_last = nullptr;
    for (std::uint32_t i = age + 1; i < count; ++i) {
        SendOp *op = ring_[(head_ + i) % depth_].op;
        if (op == nullptr) continue;  // an idempotent report nobody owns: the next one says as much (see the header)
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
    complete_chain(done, 0, IBV_WC_SUCCESS);
    if (refused != nullptr) {
        refused->posted_on = connection;
        refused->on_complete(refused, wc.status);
    }
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
        if (age < outstanding() && ring_[static_cast<std::uint32_t>(wc.wr_id >> kSendWrIdSlotShift)].signaled) {
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
        if (slot.signaled) break;
    }
    drain_pending();
    return IBV_WC_SUCCESS;
}

}  // namespace xrc
