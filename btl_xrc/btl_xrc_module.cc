// The module function table: peers (add_procs/del_procs), send/receive descriptors (alloc, free,
// prepare_src, send, sendi) and finalize. RDMA and atomics are in btl_xrc_rdma.cc, progress in
// btl_xrc_progress.cc.
#include "btl_xrc_eager.h"
#include "btl_xrc_frag.h"
#include "btl_xrc_job.h"
#include "btl_xrc_rdma.h"

#include <arpa/inet.h>

#include <cstring>
#include <new>

namespace {

mca_btl_xrc_module_t *as_xrc(mca_btl_base_module_t *btl) { return reinterpret_cast<mca_btl_xrc_module_t *>(btl); }

xrc::PortTransport::AddressLookup lookup_for(mca_btl_xrc_module_t *m) {
    mca_btl_xrc_job_t *job = mca_btl_xrc_component.job;
    return [job, m](uint32_t rank) { return job->port_address(rank, m->index); };
}

// First add_procs (during MPI_Init, after the fence, before the final MPI_Init barrier): ready the TGT QPs this
// process owns, so every sender finds them ready when it leaves MPI_Init; every local rank holds the XRC domain
// by now, so its file can go.
int wire_up(mca_btl_xrc_module_t *m) {
    if (m->wired) return OPAL_SUCCESS;
    const std::string why = m->transport->bring_up_owned_tgts(lookup_for(m));
    if (!why.empty()) {
        opal_output(0, "btl:xrc: %s: %s:%u: cannot ready the XRC receive QPs: %s", opal_process_info.nodename,
                    m->transport->device_name().c_str(), m->transport->port_num(), why.c_str());
        return OPAL_ERROR;
    }
    m->transport->release_domain_file();
    m->wired = true;
    const auto c = m->transport->counts();
    BTL_XRC_VERBOSE(10, "btl:xrc: %s:%u wired: %zu INI QPs, %zu TGT QPs owned, %zu SRQs, %zu bytes of receive buffers",
                    m->transport->device_name().c_str(), m->transport->port_num(), c.ini_qps, c.tgt_qps_owned,
                    c.srqs, c.receive_bytes);
    return OPAL_SUCCESS;
}

int xrc_add_procs(mca_btl_base_module_t *btl, size_t nprocs, opal_proc_t **procs, mca_btl_base_endpoint_t **endpoints,
                  opal_bitmap_t *reachable) noexcept {
    auto *m = as_xrc(btl);
    try {
        if (wire_up(m) != OPAL_SUCCESS) return OPAL_ERROR;
        const auto lookup = lookup_for(m);
        for (size_t i = 0; i < nprocs; ++i) {
            opal_proc_t *proc = procs[i];
            if (proc->proc_name.jobid != mca_btl_xrc_component.job->jobid) continue;  // other jobs: not supported
            const uint32_t rank = proc->proc_name.vpid;
            if (lookup(rank) == nullptr) continue;  // no xrc on that peer: someone else reaches it
            auto endpoint = std::make_unique<mca_btl_base_endpoint_t>();
            endpoint->proc = proc;
            endpoint->module = m;
            const std::string why = m->transport->connect(rank, lookup, endpoint->route);
            if (!why.empty()) {
                const char *host = mca_btl_xrc_proc_hostname(proc);
                BTL_XRC_VERBOSE(1, "btl:xrc: %s: cannot connect to rank %u (%s): %s", opal_process_info.nodename,
                                rank, host ? host : "?", why.c_str());
                continue;
            }
            if (endpoint->route.srq_for(btl->btl_max_send_size) == 0) {
                // The peer's receive classes cannot hold our largest fragment (different btl_xrc_receive_queues).
                opal_output(0, "btl:xrc: %s: rank %u's largest receive class (%u bytes) is smaller than "
                            "btl_xrc_max_send_size (%zu): set the same btl_xrc_receive_queues on every process",
                            opal_process_info.nodename, rank, endpoint->route.srqs.back().buffer_size,
                            btl->btl_max_send_size);
                continue;
            }
            mca_btl_xrc_eager_endpoint_init(m, endpoint.get());
            m->endpoints->insert(endpoint.get());
            endpoints[i] = endpoint.release();
            if (reachable != nullptr) opal_bitmap_set_bit(reachable, static_cast<int>(i));
        }
        return OPAL_SUCCESS;
    } catch (...) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
}

int xrc_del_procs(mca_btl_base_module_t *btl, size_t nprocs, opal_proc_t **, mca_btl_base_endpoint_t **endpoints) noexcept {
    auto *m = as_xrc(btl);
    for (size_t i = 0; i < nprocs; ++i) {
        if (endpoints[i] != nullptr && m->endpoints->erase(endpoints[i]) == 1) {
            mca_btl_xrc_eager_endpoint_fini(endpoints[i]);
            delete endpoints[i];
        }
    }
    return OPAL_SUCCESS;
}

mca_btl_base_descriptor_t *xrc_alloc(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, uint8_t order,
                                     size_t size, uint32_t flags) noexcept {
    auto *m = as_xrc(btl);
    mca_btl_xrc_frag_t *frag = nullptr;
    if (size <= btl->btl_eager_limit)
        frag = mca_btl_xrc_frag_get(&m->eager_frags);
    else if (size <= btl->btl_max_send_size)
        frag = mca_btl_xrc_frag_get(&m->max_frags);
    if (frag == nullptr) return nullptr;
    frag->module = m;
    frag->endpoint = endpoint;
    frag->segment.seg_len = size;
    frag->base.des_flags = flags;
    frag->base.order = order;
    frag->base.des_cbfunc = nullptr;
    frag->base.des_cbdata = nullptr;
    return &frag->base;
}

int xrc_free(mca_btl_base_module_t *, mca_btl_base_descriptor_t *des) noexcept {
    mca_btl_xrc_frag_return(reinterpret_cast<mca_btl_xrc_frag_t *>(des));
    return OPAL_SUCCESS;
}

// sendi's stack buffer: the largest inline send (btl_xrc_max_inline_data is at most 1024), eager footer included.
constexpr size_t kInlineBufferSize = 1024 + xrc::kEagerFooterSize + 8;

// Packs up to *size bytes of the convertor's data at `dst`; *size becomes what was packed. False on error.
bool pack(opal_convertor_t *convertor, unsigned char *dst, size_t *size) noexcept {
    if (*size == 0) return true;
    iovec iov{dst, *size};
    uint32_t iov_count = 1;
    return opal_convertor_pack(convertor, &iov, &iov_count, size) >= 0;
}

// The header, then the payload from the convertor: what sendi puts on the wire.
bool assemble(unsigned char *dst, const void *header, size_t header_size, opal_convertor_t *convertor,
              size_t payload_size) noexcept {
    std::memcpy(dst, header, header_size);
    return pack(convertor, dst + header_size, &payload_size);
}

mca_btl_base_descriptor_t *xrc_prepare_src(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                                           opal_convertor_t *convertor, uint8_t order, size_t reserve, size_t *size,
                                           uint32_t flags) noexcept {
    size_t max_data = *size;
    if (reserve + max_data > btl->btl_max_send_size) max_data = btl->btl_max_send_size - reserve;
    auto *des = xrc_alloc(btl, endpoint, order, reserve + max_data, flags);
    if (des == nullptr) return nullptr;
    auto *frag = reinterpret_cast<mca_btl_xrc_frag_t *>(des);
    if (!pack(convertor, static_cast<unsigned char *>(frag->segment.seg_addr.pval) + reserve, &max_data)) {
        mca_btl_xrc_frag_return(frag);
        return nullptr;
    }
    *size = max_data;
    frag->segment.seg_len = reserve + max_data;
    return des;
}

// A send fragment's completion: the owner's callback, then the fragment goes back if the BTL owns it.
void send_complete(xrc::SendOp *op, ibv_wc_status status) noexcept {
    mca_btl_xrc_frag_t *frag = frag_of(op);
    const int rc = status == IBV_WC_SUCCESS ? OPAL_SUCCESS : OPAL_ERROR;
    if (frag->base.des_cbfunc != nullptr)
        frag->base.des_cbfunc(&frag->module->super, frag->endpoint, &frag->base, rc);
    if (frag->base.des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) mca_btl_xrc_frag_return(frag);
}

inline void prepare_send(xrc::SendOp &op, mca_btl_base_endpoint_t *endpoint, const void *data, uint32_t len,
                         uint32_t lkey, mca_btl_base_tag_t tag) noexcept {
    mca_btl_xrc_prepare_send(op, endpoint, data, len, lkey, make_imm(tag));
}

int xrc_send(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, mca_btl_base_descriptor_t *des,
             mca_btl_base_tag_t tag) noexcept {
    auto *m = as_xrc(btl);
    auto *frag = reinterpret_cast<mca_btl_xrc_frag_t *>(des);
    frag->endpoint = endpoint;
    const auto len = static_cast<uint32_t>(frag->segment.seg_len);
    xrc::SendQueue *queue_ptr = mca_btl_xrc_endpoint_queue(endpoint);
    if (OPAL_UNLIKELY(queue_ptr == nullptr)) return OPAL_ERROR;
    xrc::SendQueue &queue = *queue_ptr;
    auto *data = static_cast<unsigned char *>(frag->segment.seg_addr.pval);
    // Into the peer's eager RDMA ring when it granted one, it has room and the footer fits behind the data;
    // only in order: not past sends still queued for credit.
    const bool eager = endpoint->eager.can_send(len) && xrc::eager_wire_size(len) <= frag->capacity &&
                       queue.credits() > 0 && !queue.has_pending();
    uint32_t wire = len;
    if (eager) {
        mca_btl_xrc_eager_prepare(frag->op, endpoint, data, len, frag->lkey, tag);
        wire = xrc::eager_wire_size(len);
    } else {
        prepare_send(frag->op, endpoint, data, len, frag->lkey, tag);
    }
    // Inline and nobody asked for a callback: the data is in the work request, the fragment is free at once.
    if (wire <= m->transport->max_inline() && !(des->des_flags & MCA_BTL_DES_SEND_ALWAYS_CALLBACK)) {
        frag->op.wr.send_flags = IBV_SEND_INLINE;
        frag->op.on_complete = nullptr;
        if (queue.try_post(frag->op) == 0) {
            if (des->des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) mca_btl_xrc_frag_return(frag);
            mca_btl_xrc_sent(m, endpoint, eager);
            return 1;
        }
        frag->op.wr.send_flags = 0;
    }
    frag->op.on_complete = send_complete;
    const int rc = queue.post_or_queue(frag->op);
    if (rc != 0) {
        mca_btl_xrc_report_error(m, endpoint, "the connection to this peer has failed");
        return OPAL_ERROR;
    }
    mca_btl_xrc_sent(m, endpoint, eager);
    return OPAL_SUCCESS;
}

int xrc_sendi(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, opal_convertor_t *convertor,
              void *header, size_t header_size, size_t payload_size, uint8_t order, uint32_t flags,
              mca_btl_base_tag_t tag, mca_btl_base_descriptor_t **descriptor) noexcept {
    auto *m = as_xrc(btl);
    const size_t total = header_size + payload_size;
    if (descriptor != nullptr) *descriptor = nullptr;
    xrc::SendQueue *queue_ptr = mca_btl_xrc_endpoint_queue(endpoint);
    if (OPAL_UNLIKELY(queue_ptr == nullptr)) return OPAL_ERROR;
    xrc::SendQueue &queue = *queue_ptr;
    if (total > btl->btl_eager_limit || queue.credits() == 0 || queue.has_pending())
        return OPAL_ERR_OUT_OF_RESOURCE;
    const auto length = static_cast<uint32_t>(total);
    const bool eager = endpoint->eager.can_send(length);
    // Packing advances the convertor: when the post then fails, ob1 falls back to another send path that must
    // start from the same position.
    size_t position = convertor != nullptr ? convertor->bConverted : 0;
    auto rewind = [&] {
        if (payload_size > 0) (void)opal_convertor_set_position(convertor, &position);
    };
    if ((eager ? xrc::eager_wire_size(length) : length) <= m->transport->max_inline()) {
        // Small: assemble on the stack and send inline; nothing to release afterwards.
        alignas(8) unsigned char buffer[kInlineBufferSize];
        if (!assemble(buffer, header, header_size, convertor, payload_size)) return OPAL_ERROR;
        xrc::SendOp op;
        if (eager)
            mca_btl_xrc_eager_prepare(op, endpoint, buffer, length, 0, tag);
        else
            prepare_send(op, endpoint, buffer, length, 0, tag);
        op.wr.send_flags = IBV_SEND_INLINE;
        if (queue.try_post(op) == 0) {
            mca_btl_xrc_sent(m, endpoint, eager);
            return OPAL_SUCCESS;
        }
        if (eager) endpoint->eager.unclaim();
        rewind();
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    auto *des = xrc_alloc(btl, endpoint, order, total, flags | MCA_BTL_DES_FLAGS_BTL_OWNERSHIP);
    if (des == nullptr) return OPAL_ERR_OUT_OF_RESOURCE;
    auto *frag = reinterpret_cast<mca_btl_xrc_frag_t *>(des);
    auto *data = static_cast<unsigned char *>(frag->segment.seg_addr.pval);
    if (!assemble(data, header, header_size, convertor, payload_size)) {
        mca_btl_xrc_frag_return(frag);
        return OPAL_ERROR;
    }
    const bool eager_frag = eager && xrc::eager_wire_size(length) <= frag->capacity;
    if (eager_frag)
        mca_btl_xrc_eager_prepare(frag->op, endpoint, data, length, frag->lkey, tag);
    else
        prepare_send(frag->op, endpoint, data, length, frag->lkey, tag);
    frag->op.on_complete = mca_btl_xrc_frag_return_on_complete;  // sendi: nobody waits, the BTL owns it
    if (queue.try_post(frag->op) != 0) {
        if (eager_frag) endpoint->eager.unclaim();
        mca_btl_xrc_frag_return(frag);
        rewind();
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    mca_btl_xrc_sent(m, endpoint, eager_frag);
    return OPAL_SUCCESS;
}

int xrc_register_error(mca_btl_base_module_t *btl, mca_btl_base_module_error_cb_fn_t cb) noexcept {
    as_xrc(btl)->error_cb = cb;
    return OPAL_SUCCESS;
}

int xrc_finalize(mca_btl_base_module_t *btl) noexcept;

}  // namespace


namespace {

int xrc_finalize(mca_btl_base_module_t *btl) noexcept {
    auto *m = as_xrc(btl);
    const auto &st = m->stats;
    BTL_XRC_VERBOSE(10, "btl:xrc: %s:%u traffic: sent %llu into eager RDMA rings, %llu through SRQs (%llu of them to "
                    "a peer whose ring was full or too small), %llu credit reports; received %llu from rings, %llu "
                    "from SRQs", m->transport->device_name().c_str(), m->transport->port_num(),
                    (unsigned long long)st.ring_sends, (unsigned long long)st.srq_sends,
                    (unsigned long long)st.srq_sends_ring_active, (unsigned long long)st.credit_reports,
                    (unsigned long long)st.ring_receives, (unsigned long long)st.srq_receives);
    mca_btl_xrc_async_fini(m);
    if (m->endpoints != nullptr) {
        for (auto *endpoint : *m->endpoints) delete endpoint;
        delete m->endpoints;
        m->endpoints = nullptr;
    }
    mca_btl_xrc_eager_fini(m);
    mca_btl_xrc_frag_lists_fini(m);
    mca_btl_xrc_rdma_fini(m);
    delete m->transport;  // every QP, SRQ, the XRC domain, CQ and PD, in that order
    m->transport = nullptr;
    delete m;
    return OPAL_SUCCESS;
}

}  // namespace

xrc::SendQueue *mca_btl_xrc_endpoint_loopback(mca_btl_base_endpoint_t *endpoint) noexcept {
    try {
        std::string why;
        mca_btl_xrc_module_t *m = endpoint->module;
        xrc::SendQueue *queue = m->transport->loopback_queue(why);
        if (queue == nullptr) {
            mca_btl_xrc_report_error(m, endpoint, ("cannot set up on-node XRC QPs: " + why).c_str());
            return nullptr;
        }
        // Every endpoint of an on-node peer shares the one loopback queue.
        const xrc::NodeMap &map = *mca_btl_xrc_component.job->map;
        const uint32_t my_node = map.node_of(mca_btl_xrc_component.job->my_rank);
        for (auto *e : *m->endpoints)
            if (e->route.queue == nullptr && map.node_of(e->route.rank) == my_node) e->route.queue = queue;
        endpoint->route.queue = queue;
        return queue;
    } catch (...) {
        return nullptr;
    }
}

int mca_btl_xrc_module_init(mca_btl_xrc_module_t *m) noexcept {
    m->endpoints = new (std::nothrow) std::unordered_set<mca_btl_base_endpoint_t *>();
    if (m->endpoints == nullptr) return OPAL_ERR_OUT_OF_RESOURCE;
    int rc = mca_btl_xrc_rdma_init(m);  // the rcache first: the fragment lists register through it
    if (rc == OPAL_SUCCESS) rc = mca_btl_xrc_frag_lists_init(m);
    if (rc == OPAL_SUCCESS) rc = mca_btl_xrc_eager_init(m);
    if (rc == OPAL_SUCCESS) mca_btl_xrc_async_init(m);
    return rc;
}

mca_btl_base_module_t mca_btl_xrc_module_template = [] {
    mca_btl_xrc_module_t m{};
    m.super.btl_component = &mca_btl_xrc_component.super;
    m.super.btl_add_procs = xrc_add_procs;
    m.super.btl_del_procs = xrc_del_procs;
    m.super.btl_finalize = xrc_finalize;
    m.super.btl_alloc = xrc_alloc;
    m.super.btl_free = xrc_free;
    m.super.btl_prepare_src = xrc_prepare_src;
    m.super.btl_send = xrc_send;
    m.super.btl_sendi = xrc_sendi;
    m.super.btl_put = mca_btl_xrc_put;
    m.super.btl_get = mca_btl_xrc_get;
    m.super.btl_atomic_op = mca_btl_xrc_atomic_op;
    m.super.btl_atomic_fop = mca_btl_xrc_atomic_fop;
    m.super.btl_atomic_cswap = mca_btl_xrc_atomic_cswap;
    m.super.btl_flush = mca_btl_xrc_flush;
    m.super.btl_register_mem = mca_btl_xrc_register_mem;
    m.super.btl_deregister_mem = mca_btl_xrc_deregister_mem;
    m.super.btl_register_error = xrc_register_error;
    m.super.btl_registration_handle_size = sizeof(mca_btl_base_registration_handle_t);
    return m.super;
}();
