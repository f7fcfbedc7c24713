// The send side of one XRC INI QP (one per remote node): credits, selective signaling, and a queue of sends
// that found no credit. No allocation, lock or syscall on this path: operations are caller-owned SendOp
// records (embedded in BTL fragments), the ring is sized at creation.
//
// Selective signaling: a work request is signaled when its owner needs to hear of it (a callback), every
// `signal_interval` requests, and whenever the credits left would fall below the interval, so the ring can never
// fill up with requests whose completion nobody will report. A signaled completion retires every request
// posted before it on the same QP (completions are in order per QP).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <vector>

namespace xrc {

struct SendOp;
// status: IBV_WC_SUCCESS or the failing work completion's status.
using SendCompletionFn = void (*)(SendOp *op, ibv_wc_status status) noexcept;

class SendQueue;

// A send work request's id names its queue and its ring slot: the queue's address in the low 48 bits (Linux
// user-space addresses on x86-64 and aarch64 fit), the slot (below 65536: the depth is capped there) above. So an
// error completion names exactly the request that failed, even when the requests before it were unsignaled and
// produced no completion of their own. Bit 0 stays clear (receive ids set it, see is_recv_wr_id).
inline constexpr unsigned kSendWrIdSlotShift = 48;
inline SendQueue *send_queue_of(std::uint64_t wr_id) noexcept {
    return reinterpret_cast<SendQueue *>(wr_id & ((std::uint64_t{1} << kSendWrIdSlotShift) - 1));
}

struct SendOp {
    ibv_send_wr wr{};  // prepared by the owner: opcode, sg_list, send_flags, remote_srqn, rdma/atomic fields
    ibv_sge sge{};
    SendCompletionFn on_complete = nullptr;  // null: nobody waits for this operation (inline send)
    SendOp *next_pending = nullptr;
};

class SendQueue {
public:
    SendQueue(ibv_qp *qp, std::uint32_t depth, std::uint32_t signal_interval, std::uint32_t node);
    SendQueue(const SendQueue &) = delete;
    SendQueue &operator=(const SendQueue &) = delete;

    ibv_qp *qp() const noexcept { return qp_; }
    std::uint32_t node() const noexcept { return node_; }
    bool broken() const noexcept { return broken_; }
    std::uint32_t credits() const noexcept { return depth_ - (tail_ - head_); }
    std::uint32_t outstanding_callbacks() const noexcept { return outstanding_callbacks_; }
    bool has_pending() const noexcept { return pending_head_ != nullptr; }

    // Posts now, or returns EAGAIN when out of credit (nothing queued), or the post's errno. The op must stay
    // valid until its completion if it has on_complete; otherwise (inline sends) it may be a temporary.
    int try_post(SendOp &op) noexcept;
    // Posts now or queues until credit returns (the op must stay valid). 0, or an errno if the QP is broken.
    int post_or_queue(SendOp &op) noexcept;

    // A completion of this QP. Returns the failing status on the first error (the QP is then broken and
    // every outstanding and queued op has been completed with that status), IBV_WC_SUCCESS otherwise.
    ibv_wc_status on_completion(const ibv_wc &wc) noexcept;

    // The operation an error completion of this QP names, to be asked before on_completion completes it: null
    // when that request had no owner (an inline send, a fragment nobody waits for), or is no longer outstanding.
    const SendOp *failed_op(const ibv_wc &wc) const noexcept;

private:
    struct Slot {
        SendOp *op;
        bool signaled;
    };
    int post_now(SendOp &op) noexcept;
    void drain_pending() noexcept;
    void fail_all(ibv_wc_status status) noexcept;

    ibv_qp *qp_;
    std::uint32_t depth_;
    std::uint32_t signal_interval_;
    std::uint32_t node_;
    std::vector<Slot> ring_;
    std::uint32_t head_ = 0;  // oldest outstanding
    std::uint32_t tail_ = 0;  // next free
    std::uint32_t since_signal_ = 0;
    std::uint32_t outstanding_callbacks_ = 0;
    SendOp *pending_head_ = nullptr;
    SendOp *pending_tail_ = nullptr;
    bool broken_ = false;
};

}  // namespace xrc
