// SPDX-License-Identifier: BSD-3-Clause
// One-sided operations for ob1 (RGET/RPUT) and osc/rdma: RDMA write/read and the two IB atomics (fetch-and-add,
// compare-and-swap), each a descriptor from the module's rdma free list posted on the INI QP toward the peer's
// node (the work request still names one of the peer's SRQs: XRC routes by it). Memory registration goes through
// Open MPI's rcache (grdma), so repeated registrations of the same buffer hit its cache.
#include "btl_xrc_frag.h"
#include "btl_xrc_job.h"
#include "btl_xrc_rdma.h"
#include "btl_xrc_tsan.h"

#include "src/core/async_event_policy.h"
#include "src/core/operation_text.h"
#include "src/core/port_transport.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

int register_mem_cb(void *reg_data, void *base, size_t size, mca_rcache_base_registration_t *reg) {
    auto *m = static_cast<mca_btl_xrc_module_t *>(reg_data);
    auto *xreg = reinterpret_cast<mca_btl_xrc_reg_t *>(reg);
    BTL_XRC_TSAN_ACQUIRE(reg);  // from the rcache's free list: its last deregistration came before
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    xreg->mr = ibv_reg_mr(m->transport->pd(), base, size, access);
    if (xreg->mr == nullptr) {
        BTL_XRC_TSAN_RELEASE(reg);  // the rcache returns it to its list at once
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    xrc::count_registration(m->counters, size);
    xreg->handle.lkey = xreg->mr->lkey;
    xreg->handle.rkey = xreg->mr->rkey;
    return OPAL_SUCCESS;
}

int deregister_mem_cb(void *reg_data, mca_rcache_base_registration_t *reg) {
    auto *xreg = reinterpret_cast<mca_btl_xrc_reg_t *>(reg);
    // back to the rcache's free list after this, for its next registration
    if (xreg->mr == nullptr) {
        BTL_XRC_TSAN_RELEASE(reg);
        return OPAL_SUCCESS;
    }
    const size_t length = xreg->mr->length;
    if (ibv_dereg_mr(xreg->mr) != 0) return OPAL_ERROR;
    xrc::count_deregistration(static_cast<mca_btl_xrc_module_t *>(reg_data)->counters, length);
    xreg->mr = nullptr;
    BTL_XRC_TSAN_RELEASE(reg);
    return OPAL_SUCCESS;
}

// The head of the BML's mca_bml_base_btl_t, the same in Open MPI 4.1 and 5.0 (ompi/mca/bml/bml.h), which a BTL
// cannot include (it is the ompi layer's).
struct BmlBtlHead {
    uint32_t btl_flags;
    float btl_weight;
    mca_btl_base_module_t *btl;
    mca_btl_base_endpoint_t *btl_endpoint;
};

// Every one-sided operation completes here, so flush sees it, even one posted without a callback (osc/rdma
// leaves it out for a put that needs no clean-up).
void rdma_complete(xrc::SendOp *op, ibv_wc_status status) noexcept {
    mca_btl_xrc_frag_t *frag = frag_of(op);
    bool reported = false;
    // Handed back by a timeout on one rail (SendQueue::hand_back_after): a put or a get is done again over the next
    // connection (the same registrations: the same rail), once more at worst, which moves the same bytes to the
    // same place; an atomic that reached its QP may have executed, and is never done twice: the job ends, saying so.
    if (OPAL_UNLIKELY(status == IBV_WC_RETRY_EXC_ERR) && mca_btl_xrc_outage_enabled() && !frag->module->finalizing &&
        !frag->endpoint->peer.queue->broken()) {
        if (!xrc::is_atomic(op->wr) || op->posted_on == 0) {
            if (frag->endpoint->peer.queue->post_or_queue(*op) == 0) return;
        } else {
            mca_btl_xrc_report_error(frag->module, frag->endpoint,
                                     "an atomic operation went unacknowledged for the retry budget: it may have "
                                     "executed, and an atomic is never sent twice");
            reported = true;
        }
    }
    // With several rails a failed send goes out again over another; a one-sided operation that failed with its
    // rail does not. An atomic may have executed (only its answer was lost), and its window is registered on this
    // rail only; a put or get moves to sends when ob1 made it, but another caller (osc/rdma) would take the
    // failure for success, its window this rail's too. The job ends, saying so.
    // (Toward a process that died, the operation fails, and so do the requests waiting on it: ULFM.)
    if (OPAL_UNLIKELY(status != IBV_WC_SUCCESS) && !reported && op->posted_on != 0 && mca_btl_xrc_failover_enabled() &&
        !frag->module->finalizing && !frag->endpoint->dead &&
        (xrc::is_atomic(op->wr) ||
         !mca_btl_xrc_rdma_caller_recovers(&frag->module->super, frag->endpoint, frag->rdma_context))) {
        try {
            mca_btl_xrc_report_error(frag->module, frag->endpoint, xrc::one_sided_rail_failure(op->wr, status).c_str());
        } catch (...) {  // out of memory for the sentence: the job ends all the same
            mca_btl_xrc_report_error(frag->module, frag->endpoint, "a one-sided operation failed with its rail");
        }
    }
    if (frag->rdma_cb != nullptr && !frag->module->finalizing)
        frag->rdma_cb(&frag->module->super, frag->endpoint, frag->local_address, frag->local_handle, frag->rdma_context,
                      frag->rdma_cbdata,
                      status == IBV_WC_SUCCESS ? OPAL_SUCCESS
                      : frag->endpoint->dead   ? OPAL_ERR_UNREACH
                                               : OPAL_ERROR);
    mca_btl_xrc_frag_return(frag);
}

mca_btl_xrc_frag_t *rdma_frag(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint, void *local_address,
                              mca_btl_base_registration_handle_t *local_handle, mca_btl_base_rdma_completion_fn_t cb,
                              void *context, void *cbdata) {
    mca_btl_xrc_frag_t *frag = mca_btl_xrc_frag_get(&m->rdma_frags);
    if (frag == nullptr) return nullptr;
    frag->module = m;
    frag->endpoint = endpoint;
    frag->local_address = local_address;
    frag->local_handle = local_handle;
    frag->rdma_cb = cb;
    frag->rdma_context = context;
    frag->rdma_cbdata = cbdata;
    xrc::SendOp &op = frag->op;
    op.wr = ibv_send_wr{};
    op.wr.sg_list = &op.sge;
    op.wr.num_sge = 1;
    op.wr.qp_type.xrc.remote_srqn = endpoint->peer.srqs.front().srq_num;
    op.on_complete = rdma_complete;
    return frag;
}

// Called with the module's lock held.
int post(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint, mca_btl_xrc_frag_t *frag) {
    if (endpoint->peer.queue->post_or_queue(frag->op) != 0) {
        const std::string what = xrc::describe_operation(frag->op.wr) + ": the connection to this peer has failed";
        mca_btl_xrc_frag_return(frag);
        mca_btl_xrc_report_unreachable(m, endpoint, endpoint->peer.queue, what.c_str());
        return OPAL_ERROR;
    }
    return OPAL_SUCCESS;
}

int rdma(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, ibv_wr_opcode opcode, void *local_address,
         uint64_t remote_address, mca_btl_base_registration_handle_t *local_handle,
         mca_btl_base_registration_handle_t *remote_handle, size_t size, mca_btl_base_rdma_completion_fn_t cbfunc,
         void *cbcontext, void *cbdata) {
    auto *m = as_xrc(btl);
    // Without a local registration only a write that fits inline (btl_put_local_registration_threshold): its data
    // is copied into the work request when it is posted.
    const bool inline_write =
        local_handle == nullptr && opcode == IBV_WR_RDMA_WRITE && size <= m->transport->max_inline();
    if (size > UINT32_MAX || (local_handle == nullptr && !inline_write) || remote_handle == nullptr)
        return OPAL_ERR_BAD_PARAM;
    mca_btl_xrc_frag_t *frag = rdma_frag(m, endpoint, local_address, local_handle, cbfunc, cbcontext, cbdata);
    if (frag == nullptr) return OPAL_ERR_OUT_OF_RESOURCE;
    frag->op.sge = ibv_sge{reinterpret_cast<uintptr_t>(local_address), static_cast<uint32_t>(size),
                           inline_write ? 0 : local_handle->lkey};
    frag->op.wr.send_flags = inline_write ? IBV_SEND_INLINE : 0;
    frag->op.wr.opcode = opcode;
    frag->op.wr.wr.rdma.remote_addr = remote_address;
    frag->op.wr.wr.rdma.rkey = remote_handle->rkey;
    const BtlXrcLock guard(m->lock);
    BTL_XRC_TSAN_ACQUIRE(endpoint);  // published by add_procs, handed to us through ob1
    const int rc = post(m, endpoint, frag);
    if (rc == OPAL_SUCCESS && opcode == IBV_WR_RDMA_WRITE) {
        ++m->counters.rdma_writes;
        m->counters.rdma_bytes_written += size;
    } else if (rc == OPAL_SUCCESS) {
        ++m->counters.rdma_reads;
        m->counters.rdma_bytes_read += size;
    }
    return rc;
}

int atomic(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, ibv_wr_opcode opcode, void *local_address,
           uint64_t remote_address, mca_btl_base_registration_handle_t *local_handle,
           mca_btl_base_registration_handle_t *remote_handle, uint64_t compare_add, uint64_t swap, int flags,
           mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata) {
    auto *m = as_xrc(btl);
    if (flags & MCA_BTL_ATOMIC_FLAG_32BIT) return OPAL_ERR_NOT_SUPPORTED;  // IB atomics are 64-bit
    if (remote_handle == nullptr || local_handle == nullptr) return OPAL_ERR_BAD_PARAM;
    mca_btl_xrc_frag_t *frag = rdma_frag(m, endpoint, local_address, local_handle, cbfunc, cbcontext, cbdata);
    if (frag == nullptr) return OPAL_ERR_OUT_OF_RESOURCE;
    frag->op.sge = ibv_sge{reinterpret_cast<uintptr_t>(local_address), 8, local_handle->lkey};
    frag->op.wr.opcode = opcode;
    frag->op.wr.wr.atomic.remote_addr = remote_address;
    frag->op.wr.wr.atomic.rkey = remote_handle->rkey;
    frag->op.wr.wr.atomic.compare_add = compare_add;
    frag->op.wr.wr.atomic.swap = swap;
    const BtlXrcLock guard(m->lock);
    BTL_XRC_TSAN_ACQUIRE(endpoint);  // published by add_procs, handed to us through ob1
    const int rc = post(m, endpoint, frag);
    if (rc == OPAL_SUCCESS) ++m->counters.atomics;
    return rc;
}

}  // namespace

bool mca_btl_xrc_rdma_caller_recovers(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                                      const void *cbcontext) noexcept {
    if (cbcontext == nullptr) return false;
    BmlBtlHead head;
    // Copied, not dereferenced: another caller's context (osc/rdma's sync, module or tagged request pointer) is
    // memory of at least this size, but of no known alignment or type.
    std::memcpy(&head, cbcontext, sizeof(head));
    return head.btl == btl && head.btl_endpoint == endpoint;
}

int mca_btl_xrc_rdma_refuse(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint, void *local_address,
                            mca_btl_base_registration_handle_t *local_handle, mca_btl_base_rdma_completion_fn_t cbfunc,
                            void *cbcontext, void *cbdata) noexcept {
    mca_btl_xrc_frag_t *frag = rdma_frag(m, endpoint, local_address, local_handle, cbfunc, cbcontext, cbdata);
    if (frag == nullptr) return OPAL_ERR_OUT_OF_RESOURCE;
    frag->op.posted_on = 0;
    mca_btl_xrc_defer(m, frag, IBV_WC_GENERAL_ERR);
    return OPAL_SUCCESS;
}

int mca_btl_xrc_put(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, void *local_address,
                    uint64_t remote_address, mca_btl_base_registration_handle_t *local_handle,
                    mca_btl_base_registration_handle_t *remote_handle, size_t size, int, int,
                    mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata) noexcept {
    return rdma(btl, endpoint, IBV_WR_RDMA_WRITE, local_address, remote_address, local_handle, remote_handle, size,
                cbfunc, cbcontext, cbdata);
}

int mca_btl_xrc_get(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, void *local_address,
                    uint64_t remote_address, mca_btl_base_registration_handle_t *local_handle,
                    mca_btl_base_registration_handle_t *remote_handle, size_t size, int, int,
                    mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata) noexcept {
    return rdma(btl, endpoint, IBV_WR_RDMA_READ, local_address, remote_address, local_handle, remote_handle, size,
                cbfunc, cbcontext, cbdata);
}

int mca_btl_xrc_atomic_fop(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, void *local_address,
                           uint64_t remote_address, mca_btl_base_registration_handle_t *local_handle,
                           mca_btl_base_registration_handle_t *remote_handle, mca_btl_base_atomic_op_t op,
                           uint64_t operand, int flags, int, mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                           void *cbdata) noexcept {
    if (op != MCA_BTL_ATOMIC_ADD) return OPAL_ERR_NOT_SUPPORTED;
    return atomic(btl, endpoint, IBV_WR_ATOMIC_FETCH_AND_ADD, local_address, remote_address, local_handle,
                  remote_handle, operand, 0, flags, cbfunc, cbcontext, cbdata);
}

int mca_btl_xrc_atomic_op(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, uint64_t remote_address,
                          mca_btl_base_registration_handle_t *remote_handle, mca_btl_base_atomic_op_t op,
                          uint64_t operand, int flags, int order, mca_btl_base_rdma_completion_fn_t cbfunc,
                          void *cbcontext, void *cbdata) noexcept {
    // Non-fetching: the old value lands in the module's registered scratch word, which nobody reads.
    auto *m = as_xrc(btl);
    return mca_btl_xrc_atomic_fop(btl, endpoint, m->atomic_scratch.data(), remote_address, &m->atomic_scratch_handle,
                                  remote_handle, op, operand, flags, order, cbfunc, cbcontext, cbdata);
}

int mca_btl_xrc_atomic_cswap(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, void *local_address,
                             uint64_t remote_address, mca_btl_base_registration_handle_t *local_handle,
                             mca_btl_base_registration_handle_t *remote_handle, uint64_t compare, uint64_t value,
                             int flags, int, mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                             void *cbdata) noexcept {
    return atomic(btl, endpoint, IBV_WR_ATOMIC_CMP_AND_SWP, local_address, remote_address, local_handle, remote_handle,
                  compare, value, flags, cbfunc, cbcontext, cbdata);
}

namespace {

// The live endpoint reached through `queue` whose SRQ is `srqn`: the peer a kept copy (an inline send, which names
// no fragment) went to. Null if none.
mca_btl_base_endpoint_t *endpoint_of_srq(mca_btl_xrc_module_t *m, const xrc::SendQueue &queue, uint32_t srqn) {
    for (mca_btl_base_endpoint_t *endpoint : mca_btl_xrc_endpoints_of(m, false))
        if (endpoint->peer.queue == &queue)
            for (const xrc::SrqEntry &srq : endpoint->peer.srqs)
                if (srq.srq_num == srqn) return endpoint;
    return nullptr;
}

}  // namespace

void mca_btl_xrc_report_failed_completion(mca_btl_xrc_module_t *m, const xrc::SendQueue &queue,
                                          const ibv_wc &wc) noexcept {
    try {
        const xrc::SendOp *failed = queue.failed_op(wc);
        const char *own = failed != nullptr ? m->transport->own_operation(failed) : nullptr;
        // Without an owner, an inline send the queue kept a copy of (under ULFM): its work request says where.
        const xrc::SendOp *copy = failed == nullptr ? queue.failed_copy(wc) : nullptr;
        const bool requeues = queue.would_requeue(wc);
        if (requeues && wc.status == IBV_WC_RETRY_EXC_ERR) {
            // An outage past the retry budget ridden through (btl_xrc_outage_limit): what was not acknowledged goes
            // out again over a new connection, made when the port or path is back (btl_xrc_failover.cc).
            const xrc::NodeLink *link = m->transport->link_of(queue);
            const std::string toward = link != nullptr                    ? "node " + std::to_string(link->node())
                                       : m->transport->is_loopback(queue) ? std::string("this node's ranks")
                                                                          : std::string("node ?");
            opal_output(0,
                        "btl:xrc: %s: %s: requests toward %s went unacknowledged for the retry budget (%s): "
                        "connecting again; what was not acknowledged goes out again",
                        opal_process_info.nodename, m->transport->rail_name().c_str(), toward.c_str(),
                        xrc::describe_qp(wc.qp_num, m->transport->role_of(wc.qp_num)).c_str());
            return;
        }
        if (requeues) {
            // A refusal the queue takes at the cost of this request alone (ULFM, one rail): what it named is
            // gone, so its process died; the link connects again for the others (btl_xrc_peer_death.cc).
            const std::string what = (own != nullptr      ? std::string(own)
                                      : failed != nullptr ? xrc::describe_operation(failed->wr)
                                      : copy != nullptr   ? xrc::describe_operation(copy->wr)
                                                          : std::string("a request")) +
                                     " (" + ibv_wc_status_str(wc.status) + ")";
            BTL_XRC_VERBOSE(1, "btl:xrc: %s: %s: refused: %s; what followed it goes out again over a new connection",
                            opal_process_info.nodename, m->transport->rail_name().c_str(), what.c_str());
            mca_btl_base_endpoint_t *to = nullptr;
            if (failed != nullptr && own == nullptr)
                to = frag_of(const_cast<xrc::SendOp *>(failed))->endpoint;
            else if (copy != nullptr)
                to = endpoint_of_srq(m, queue, copy->wr.qp_type.xrc.remote_srqn);
            if (to != nullptr && !to->other_job) {
                const std::string why = "its node's HCA refused " + what;
                mca_btl_xrc_peer_died(to->peer.rank, why.c_str());
            }
            return;
        }
        mca_btl_base_endpoint_t *endpoint = nullptr;
        // Where the queue goes, for operations that name no peer of their own: the node's link (its rank and host),
        // or this node's loopback.
        std::string toward;
        if (m->transport->is_loopback(queue)) {
            toward = "a rank on this node (HCA loopback)";
        } else if (const xrc::NodeLink *link = m->transport->link_of(queue); link != nullptr) {
            // The link's rank stands for the node: the report names it as the peer when this process has an
            // endpoint for it, here otherwise.
            toward = "node " + std::to_string(link->node());
            if (mca_btl_base_endpoint_t *owner = mca_btl_xrc_endpoint_for(m, link->owner());
                owner != nullptr && owner->proc != nullptr)
                endpoint = owner;
            else
                toward += " (through rank " + std::to_string(link->owner()) + " on " +
                          mca_btl_xrc_component.job->hostname_of(link->owner()) + ")";
        } else {
            toward = "an unknown node";
        }
        std::string operation;
        if (own != nullptr) {  // the transport's own operation: no fragment behind it
            operation = std::string(own) + " toward " + toward;
        } else if (failed != nullptr) {
            operation = xrc::describe_operation(failed->wr);
            endpoint = frag_of(const_cast<xrc::SendOp *>(failed))->endpoint;
        } else if (copy != nullptr) {
            operation = xrc::describe_operation(copy->wr);
            if (mca_btl_base_endpoint_t *to = endpoint_of_srq(m, queue, copy->wr.qp_type.xrc.remote_srqn))
                endpoint = to;
        } else {  // a request without an owner (inline, its data in the work request): only its node is known
            operation = "an inline send or RDMA write to " + toward;
        }
        ibv_port_attr attr{};
        std::optional<ibv_port_state> down;
        if (ibv_query_port(m->transport->context(), m->transport->port_num(), &attr) == 0 &&
            attr.state != IBV_PORT_ACTIVE)
            down = attr.state;
        const std::string what =
            xrc::failed_completion_text(operation, wc, down, mca_btl_xrc_component.job->my_rank,
                                        xrc::describe_qp(wc.qp_num, m->transport->role_of(wc.qp_num)));
        // During our finalize, toward a rank that said it is in its own: it would have dropped the message (its upper
        // layers are gone), so nothing is lost.
        if (m->finalizing && endpoint != nullptr && !endpoint->other_job &&
            m->transport->said_finalizing(endpoint->peer.rank)) {
            BTL_XRC_VERBOSE(
                1, "btl:xrc: %s: %s: %s, for rank %u, which is finalizing (it drops what arrives): not lost",
                opal_process_info.nodename, m->transport->rail_name().c_str(), what.c_str(), endpoint->peer.rank);
            return;
        }
        if (mca_btl_xrc_failover_enabled() && !m->finalizing) {
            snprintf(m->failed_completion, sizeof(m->failed_completion), "%s", what.c_str());
            m->failed_queue = &queue;
            if (mca_btl_xrc_another_rail_serves(m, queue) || mca_btl_xrc_ft_enabled()) {
                // Each operation of the queue completes with the error next, and a send goes out again over another
                // rail that reaches its peer (the job ends there if none does, naming this); RDMA falls back to
                // sends in ob1. Under ULFM too, where those toward a process that died complete without ending
                // the job.
                BTL_XRC_VERBOSE(1, "btl:xrc: %s: %s: %s; its queue's operations go to another rail",
                                opal_process_info.nodename, m->transport->rail_name().c_str(), what.c_str());
                return;
            }
            // No other rail: the job ends now. Waiting for the queue's operations to say so is not enough: the kept
            // copies of inline sends (one rail riding outages) were sent as far as ob1 knows and call nobody back,
            // so a process whose only requests in flight were such copies would wait for answers that never come.
            mca_btl_xrc_report_no_other_rail(m, endpoint, &queue, wc.status);
            return;
        }
        mca_btl_xrc_report_error(m, endpoint, what.c_str());
    } catch (...) {  // out of memory for the sentence: the completion's status alone
        mca_btl_xrc_report_error(m, nullptr, ibv_wc_status_str(wc.status));
    }
}

// Waits until every RDMA and atomic operation posted toward the endpoint's node (all nodes for a NULL or wildcard
// endpoint) has completed: all of them are signaled, so the queues' callback counts reach zero.
int mca_btl_xrc_flush(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint) noexcept {
    auto *m = as_xrc(btl);
    const bool one = endpoint != nullptr && endpoint != MCA_BTL_ENDPOINT_ANY;
    for (;;) {
        {
            const BtlXrcLock guard(m->lock);
            if (one) {
                const xrc::SendQueue &q = *endpoint->peer.queue;
                if (q.outstanding_callbacks() == 0 && !q.has_pending()) return OPAL_SUCCESS;
                if (q.broken()) return OPAL_ERROR;
            } else {
                if (m->transport->all_reported()) return OPAL_SUCCESS;
                if (m->transport->any_broken()) return OPAL_ERROR;
            }
        }
        mca_btl_xrc_progress_module(m);
    }
}

mca_btl_base_registration_handle_t *mca_btl_xrc_register_mem(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *,
                                                             void *base, size_t size, uint32_t flags) noexcept {
    auto *m = as_xrc(btl);
    mca_rcache_base_registration_t *reg = nullptr;
    int access = 0;
    if (flags & MCA_BTL_REG_FLAG_LOCAL_WRITE) access |= MCA_RCACHE_ACCESS_LOCAL_WRITE;
    if (flags & MCA_BTL_REG_FLAG_REMOTE_WRITE) access |= MCA_RCACHE_ACCESS_REMOTE_WRITE;
    if (flags & MCA_BTL_REG_FLAG_REMOTE_READ) access |= MCA_RCACHE_ACCESS_REMOTE_READ;
    if (flags & MCA_BTL_REG_FLAG_REMOTE_ATOMIC) access |= MCA_RCACHE_ACCESS_REMOTE_ATOMIC;
    if (m->rcache->rcache_register(m->rcache, base, size, 0, access, &reg) != OPAL_SUCCESS || reg == nullptr)
        return nullptr;
    return &reinterpret_cast<mca_btl_xrc_reg_t *>(reg)->handle;
}

int mca_btl_xrc_deregister_mem(mca_btl_base_module_t *btl, mca_btl_base_registration_handle_t *handle) noexcept {
    auto *m = as_xrc(btl);
    auto *reg =
        reinterpret_cast<mca_btl_xrc_reg_t *>(reinterpret_cast<char *>(handle) - offsetof(mca_btl_xrc_reg_t, handle));
    m->rcache->rcache_deregister(m->rcache, &reg->base);
    return OPAL_SUCCESS;
}

int mca_btl_xrc_rdma_init(mca_btl_xrc_module_t *m) noexcept {
    mca_rcache_base_resources_t resources{};
    char name[64];
    snprintf(name, sizeof(name), "xrc.%s.%u", m->transport->device_name().c_str(), m->transport->port_num());
    resources.cache_name = name;
    resources.reg_data = m;
    resources.sizeof_reg = sizeof(mca_btl_xrc_reg_t);
    resources.register_mem = register_mem_cb;
    resources.deregister_mem = deregister_mem_cb;
    m->rcache = mca_rcache_base_module_create("grdma", m, &resources);
    if (m->rcache == nullptr) return OPAL_ERR_NOT_AVAILABLE;
    // osc/rdma hands small puts over without registering them (as openib's, up to the inline size)
    m->super.btl_put_local_registration_threshold = m->transport->max_inline();
    if (!m->atomic_scratch.allocate(64) ||
        !m->atomic_scratch.register_on(m->transport->pd(), IBV_ACCESS_LOCAL_WRITE, m->counters))
        return OPAL_ERR_OUT_OF_RESOURCE;
    m->atomic_scratch_handle = {m->atomic_scratch.lkey(), m->atomic_scratch.rkey()};
    return OPAL_SUCCESS;
}

void mca_btl_xrc_rdma_fini(mca_btl_xrc_module_t *m) noexcept {
    if (m->rcache != nullptr) mca_rcache_base_module_destroy(m->rcache);
    m->rcache = nullptr;
    m->atomic_scratch.reset();
}
