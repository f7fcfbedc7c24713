// SPDX-License-Identifier: BSD-3-Clause
// Surviving the loss of one rail when a process has more than one (one module per port). ob1 ends the job on any
// error a BTL reports as fatal and keeps choosing every BTL it was given, so failover lives here: a module whose
// rail no longer reaches a peer keeps accepting ob1's sends for it and forwards them, copied into a fragment of a
// sibling module (another rail that reaches the same process). What was queued or in flight on the lost rail
// completes here with an error and is sent again over the sibling: the fragments keep their data until their
// completion, because with several rails the sends never complete a fragment at the post (no inline send without
// a callback) and sendi always hands ob1 a descriptor. RDMA and atomics toward a lost peer fail to ob1, which
// falls back to sends for a put or get (pml/ob1: put and get failures fall back to copy in/out).
//
// With a single module none of this runs: the sends chosen at btl_init are the ones without a test of their own.
#include "btl_xrc_eager.h"
#include "btl_xrc_frag.h"
#include "btl_xrc_job.h"
#include "btl_xrc_rdma.h"

#include "src/core/port_transport.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

bool failover_on = false;

// A forwarded message travels under this tag with a header naming the rail it was sent on (its fabric, the GID's
// subnet prefix) and its own tag: the receiver hands it to ob1 as if that rail had carried it. ob1 ties a
// registration handle in a message (RGET, PUT) to the BTL that delivered it and reads or writes with that BTL:
// delivered as the sibling's, the handle of the lost rail would be used on the sibling's rail (a remote access
// error, which puts the node's shared TGT QP in the error state). Delivered as the lost rail's, the RDMA fails
// with that rail and ob1 falls back to sends. A message too large for the header goes plain (the data fragments
// of a pipeline, which carry no handle).
constexpr mca_btl_base_tag_t kForwardedTag = MCA_BTL_TAG_BTL + 0x1b;
struct ForwardedHeader {
    uint8_t subnet_prefix[8];
    uint8_t tag;
    uint8_t pad[7];  // the message after it stays 8-byte aligned
};
static_assert(sizeof(ForwardedHeader) == 16);

mca_btl_xrc_module_t *as_xrc(mca_btl_base_module_t *btl) {
    return reinterpret_cast<mca_btl_xrc_module_t *>(btl);
}

std::string rail_name(const mca_btl_xrc_module_t *m) {
    return m->transport->device_name() + ":" + std::to_string(m->transport->port_num());
}

// The same peer's endpoint on a rail that still carries its traffic, or null.
mca_btl_base_endpoint_t *sibling_of(const mca_btl_xrc_module_t *m, uint32_t rank) {
    for (const auto &module : mca_btl_xrc_component.modules) {
        mca_btl_xrc_module_t *s = module.get();
        if (s == nullptr || s == m || s->rail_lost || s->finalizing || s->endpoints == nullptr) continue;
        auto it = s->endpoints->find(rank);
        if (it == s->endpoints->end()) continue;
        mca_btl_base_endpoint_t *to = it->second;
        if (to->forward_to == nullptr && !to->peer.queue->broken()) return to;
    }
    return nullptr;
}

// A forwarded copy completed on the sibling: the original's owner hears of it as if its own rail had sent it.
void forwarded_complete(mca_btl_base_module_t *, mca_btl_base_endpoint_t *, mca_btl_base_descriptor_t *des,
                        int status) {
    auto *original = static_cast<mca_btl_xrc_frag_t *>(des->des_cbdata);
    mca_btl_xrc_module_t *m = original->module;
    if (original->base.des_cbfunc != nullptr && !m->finalizing)
        original->base.des_cbfunc(&m->super, original->endpoint, &original->base, status);
    if (original->base.des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) mca_btl_xrc_frag_return(original);
}

// Sends `frag`'s message (as prepared by its owner: header and payload in its segment) over the sibling its
// endpoint forwards to. The original stays with its owner until the copy completes.
int forward(mca_btl_xrc_frag_t *frag, mca_btl_base_tag_t tag) noexcept {
    mca_btl_base_endpoint_t *to = frag->endpoint->forward_to;
    mca_btl_xrc_module_t *s = to->module;
    const size_t length = frag->segment.seg_len;
    const bool wrapped = length + sizeof(ForwardedHeader) <= s->super.btl_max_send_size;
    const size_t wire = wrapped ? length + sizeof(ForwardedHeader) : length;
    mca_btl_base_descriptor_t *des = mca_btl_xrc_alloc(
        &s->super, to, frag->base.order, wire, MCA_BTL_DES_FLAGS_BTL_OWNERSHIP | MCA_BTL_DES_SEND_ALWAYS_CALLBACK);
    if (des == nullptr) return OPAL_ERR_OUT_OF_RESOURCE;
    auto *out = static_cast<unsigned char *>(reinterpret_cast<mca_btl_xrc_frag_t *>(des)->segment.seg_addr.pval);
    if (wrapped) {
        ForwardedHeader header{};
        std::memcpy(header.subnet_prefix, frag->module->transport->address().gid, sizeof(header.subnet_prefix));
        header.tag = tag;
        std::memcpy(out, &header, sizeof(header));
        out += sizeof(header);
    }
    std::memcpy(out, frag->segment.seg_addr.pval, length);
    des->des_cbfunc = forwarded_complete;
    des->des_cbdata = frag;
    ++frag->module->counters.failover_sends;
    const int rc = s->super.btl_send(&s->super, to, des, wrapped ? kForwardedTag : tag);
    if (rc < 0) mca_btl_xrc_frag_return(reinterpret_cast<mca_btl_xrc_frag_t *>(des));
    return rc;
}

// Completion of a send under failover: one that failed with its rail is sent again over another one.
void failover_send_complete(xrc::SendOp *op, ibv_wc_status status) noexcept {
    mca_btl_xrc_frag_t *frag = frag_of(op);
    if (OPAL_UNLIKELY(status != IBV_WC_SUCCESS) && !frag->module->finalizing) {
        if (mca_btl_xrc_fail_over(frag->module, frag->endpoint, ibv_wc_status_str(status))) {
            if (forward(frag, frag->tag) >= 0) return;
            mca_btl_xrc_report_error(frag->module, frag->endpoint,
                                     "a send that failed with its rail could not be sent over another one");
        } else {
            char what[160];
            snprintf(what, sizeof(what), "a send failed (%s) and no other rail reaches this peer",
                     ibv_wc_status_str(status));
            mca_btl_xrc_report_error(frag->module, frag->endpoint, what);
        }
    }
    mca_btl_xrc_send_complete(op, status);
}

// btl_send with several rails: never completes at the post (the fragment is what is sent again if the rail fails).
[[gnu::always_inline]] inline int failover_send_body(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                                                     mca_btl_base_descriptor_t *des, mca_btl_base_tag_t tag) noexcept {
    auto *m = as_xrc(btl);
    auto *frag = reinterpret_cast<mca_btl_xrc_frag_t *>(des);
    frag->endpoint = endpoint;
    frag->tag = tag;
    if (OPAL_UNLIKELY(endpoint->forward_to != nullptr)) return forward(frag, tag);
    xrc::Peer &peer = endpoint->peer;
    auto *data = static_cast<unsigned char *>(frag->segment.seg_addr.pval);
    const bool ring =
        peer.prepare(frag->op, data, static_cast<uint32_t>(frag->segment.seg_len), frag->lkey, tag, frag->capacity);
    frag->op.on_complete = failover_send_complete;
    if (OPAL_UNLIKELY(peer.queue->post_or_queue(frag->op) != 0)) {
        peer.unprepare(frag->op, ring);
        if (mca_btl_xrc_fail_over(m, endpoint, "the connection to this peer has failed")) return forward(frag, tag);
        mca_btl_xrc_report_error(m, endpoint, "the connection to this peer has failed");
        return OPAL_ERROR;
    }
    mca_btl_xrc_sent(m, endpoint, ring, frag->segment.seg_len);
    return OPAL_SUCCESS;
}

int failover_send(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, mca_btl_base_descriptor_t *des,
                  mca_btl_base_tag_t tag) noexcept {
    return failover_send_body(btl, endpoint, des, tag);
}

int failover_send_locked(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, mca_btl_base_descriptor_t *des,
                         mca_btl_base_tag_t tag) noexcept {
    const BtlXrcLock guard(&as_xrc(btl)->lock);
    return failover_send_body(btl, endpoint, des, tag);
}

// btl_sendi with several rails: a message assembled on the stack could not be sent again, so ob1 gets a
// descriptor to fill and send (btl_send above).
int failover_sendi(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, opal_convertor_t *, void *,
                   size_t header_size, size_t payload_size, uint8_t order, uint32_t flags, mca_btl_base_tag_t,
                   mca_btl_base_descriptor_t **descriptor) noexcept {
    const size_t total = header_size + payload_size;
    if (descriptor != nullptr)
        *descriptor = total <= btl->btl_eager_limit ? mca_btl_xrc_alloc(btl, endpoint, order, total, flags) : nullptr;
    return OPAL_ERR_OUT_OF_RESOURCE;
}

// RDMA and atomics toward a peer this rail no longer reaches: an error, which ob1 answers with sends (the
// registrations are this rail's, and the peer's keys another rail's protection domain does not know).
bool rdma_refused(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint) noexcept {
    if (OPAL_LIKELY(endpoint->forward_to == nullptr && !endpoint->peer.queue->broken())) return false;
    return endpoint->forward_to != nullptr ||
           mca_btl_xrc_fail_over(m, endpoint, "the connection to this peer has failed");
}

// btl_put or btl_get (`Rdma`) with several rails: refused toward a peer this rail no longer reaches.
template <decltype(&mca_btl_xrc_put) Rdma>
int failover_rdma(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, void *local_address,
                  uint64_t remote_address, mca_btl_base_registration_handle_t *local_handle,
                  mca_btl_base_registration_handle_t *remote_handle, size_t size, int flags, int order,
                  mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata) noexcept {
    if (rdma_refused(as_xrc(btl), endpoint)) return OPAL_ERROR;
    return Rdma(btl, endpoint, local_address, remote_address, local_handle, remote_handle, size, flags, order, cbfunc,
                cbcontext, cbdata);
}

// The rails other than `m` that still carry traffic, for the message ("simhca1:1, simhca0:2").
std::string surviving_rails(const mca_btl_xrc_module_t *m) {
    std::string names;
    for (const auto &module : mca_btl_xrc_component.modules) {
        if (module == nullptr || module.get() == m || module->rail_lost) continue;
        names += (names.empty() ? "" : ", ") + rail_name(module.get());
    }
    return names;
}

// A forwarded message arrived (on any rail): to ob1 as the module of the rail it was sent on, on this process's
// side of the same fabric; as the receiving module's if this process has none there (nothing then ties it).
void forwarded_receive(mca_btl_base_module_t *btl, const mca_btl_base_segment_t *segment) {
    ForwardedHeader header;
    if (segment->seg_len < sizeof(header)) return;
    std::memcpy(&header, segment->seg_addr.pval, sizeof(header));
    mca_btl_xrc_module_t *as = as_xrc(btl);
    for (const auto &module : mca_btl_xrc_component.modules)
        if (module != nullptr && module->transport != nullptr &&
            std::memcmp(module->transport->address().gid, header.subnet_prefix, sizeof(header.subnet_prefix)) == 0)
            as = module.get();
    const mca_btl_active_message_callback_t *reg = &as->receive_callbacks[header.tag];
    if (reg->cbfunc == nullptr) return;
    mca_btl_xrc_deliver(as, reg, header.tag, static_cast<unsigned char *>(segment->seg_addr.pval) + sizeof(header),
                        segment->seg_len - sizeof(header));
}

}  // namespace

void mca_btl_xrc_failover_enable(mca_btl_xrc_module_t *m, bool threads) noexcept {
    failover_on = true;
    mca_btl_base_active_message_trigger[kForwardedTag].cbfunc = mca_btl_xrc_receive_adapter<forwarded_receive>;
    mca_btl_base_active_message_trigger[kForwardedTag].cbdata = nullptr;
    m->super.btl_send = threads ? failover_send_locked : failover_send;
    m->super.btl_sendi = failover_sendi;
    m->super.btl_put = failover_rdma<mca_btl_xrc_put>;
    m->super.btl_get = failover_rdma<mca_btl_xrc_get>;
}

bool mca_btl_xrc_failover_enabled() noexcept {
    return failover_on;
}

bool mca_btl_xrc_fail_over(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint, const char *why) noexcept {
    if (endpoint->forward_to != nullptr) return true;
    // Another job's process: the other rails know it by (job, rank), which sibling_of does not look up.
    if (!failover_on || m->finalizing || endpoint->other_job) return false;
    mca_btl_base_endpoint_t *to = sibling_of(m, endpoint->peer.rank);
    if (to == nullptr) return false;
    endpoint->forward_to = to;
    ++m->counters.failovers;
    if (m->rail_lost) return true;  // reported once for the whole rail
    try {
        const uint32_t node = endpoint->peer.queue->node();
        if (std::find(m->lost_nodes.begin(), m->lost_nodes.end(), node) != m->lost_nodes.end()) return true;
        m->lost_nodes.push_back(node);
        opal_output(0, "btl:xrc: %s: %s: rail lost toward node %u (host %s): %s; traffic toward it continues on %s",
                    opal_process_info.nodename, rail_name(m).c_str(), node,
                    mca_btl_xrc_component.job->hostname_of(endpoint->peer.rank).c_str(), why,
                    rail_name(to->module).c_str());
    } catch (...) {  // out of memory for the message: the failover itself is done
    }
    return true;
}

bool mca_btl_xrc_lose_rail(mca_btl_xrc_module_t *m, const char *why) noexcept {
    if (!failover_on || m->finalizing) return false;
    if (m->rail_lost) return true;
    {
        const BtlXrcLock guard(&m->lock);
        for (const auto &[rank, endpoint] : *m->endpoints)
            if (endpoint->forward_to == nullptr && sibling_of(m, rank) == nullptr) return false;
        m->rail_lost = true;
        for (const auto &[rank, endpoint] : *m->endpoints)
            if (endpoint->forward_to == nullptr) {
                endpoint->forward_to = sibling_of(m, rank);
                ++m->counters.failovers;
            }
    }
    try {
        opal_output(0, "btl:xrc: %s: %s: rail lost: %s; traffic continues on %s", opal_process_info.nodename,
                    rail_name(m).c_str(), why, surviving_rails(m).c_str());
    } catch (...) {
    }
    // What the HCA completed is retired first (every send is signaled with several rails); what was queued or in
    // flight without an acknowledgement then completes with an error and goes out again over the other rails.
    const BtlXrcLock guard(&m->lock);
    mca_btl_xrc_drain_completions(m);
    m->transport->abandon();
    return true;
}
