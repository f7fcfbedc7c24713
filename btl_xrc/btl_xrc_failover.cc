// SPDX-License-Identifier: BSD-3-Clause
// Surviving the loss of one rail when a process has more than one (one module per port). ob1 ends the job on any
// error a BTL reports as fatal and keeps choosing every BTL it was given, so failover lives here: a module whose
// rail no longer reaches a peer keeps accepting ob1's sends for it and forwards them, copied into a fragment of a
// sibling module (another rail that reaches the same process). What was queued or in flight on the lost rail
// completes here with an error and is sent again over the sibling: the fragments keep their data until their
// completion, because with several rails the sends never give a fragment back at the post (no inline send: ob1
// may hear at the post that a fragment of ours is sent, but the fragment stays until its completion) and sendi
// always hands ob1 a descriptor. RDMA and atomics toward a lost peer fail to ob1, which
// falls back to sends for a put or get (pml/ob1: put and get failures fall back to copy in/out).
//
// Exactly once: a message whose completion failed with the rail may have been delivered all the same (the HCA
// wrote it at the receiver, the acknowledgement died with the rail). Each send is numbered in its endpoint's stream
// on its rail (the SRQ stream or the eager ring's), a copy sent again carries that number, and the receiver drops
// it when the lost rail delivered that many already (src/core/replay_filter.h: the counts, the verdict). The
// receiver counts SRQ messages by source in its progress (chosen at btl_init with the sends), and a ring's by the
// ring. Put and get are not counted: one whose completion failed goes back to ob1, which moves the same bytes to
// the same place again with sends (idempotent), and the message that completes the transfer (FIN, or the
// sender's data fragments) is a send, counted like the others.
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
// subnet prefix), its own tag and, for a copy sent again, its place on that rail: the receiver drops it if the rail
// delivered it, and otherwise hands it to ob1 as if that rail had carried it. ob1 ties a
// registration handle in a message (RGET, PUT) to the BTL that delivered it and reads or writes with that BTL:
// delivered as the sibling's, the handle of the lost rail would be used on the sibling's rail (a remote access
// error, which puts the node's shared TGT QP in the error state). Delivered as the lost rail's, the RDMA fails
// with that rail and ob1 falls back to sends. Every message has room for the header: ob1 is told a maximum send
// size that much smaller (mca_btl_xrc_failover_enable).
constexpr mca_btl_base_tag_t kForwardedTag = MCA_BTL_TAG_BTL + 0x1b;
enum Stream : uint8_t {
    kNew = 0,   // never posted on the lost rail (forwarded after the loss, or its post failed): delivered
    kSrq = 1,   // sent again: `seq` in the sender's SRQ stream toward this peer on the lost rail
    kRing = 2,  // sent again: `seq` in the sender's eager ring stream toward this peer on the lost rail
};
struct ForwardedHeader {
    uint8_t subnet_prefix[8];
    uint8_t tag;
    uint8_t stream;    // Stream
    uint16_t lid;      // the sender's LID on the lost rail and
    uint32_t ini_qpn;  // its INI QP toward the receiver's node there: how the receiver knows an SRQ message's source
    uint32_t seq;
    uint32_t rank;  // the sender's: the ring it wrote into on the lost rail
};
static_assert(sizeof(ForwardedHeader) == 24);  // the message after it stays 8-byte aligned

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

// A fragment of the sibling's lists for `wire` bytes: up to the full size its lists were made with (ob1 is told
// less, so that the header fits in front of its largest message).
mca_btl_xrc_frag_t *copy_frag(mca_btl_xrc_module_t *s, mca_btl_base_endpoint_t *to, uint8_t order,
                              size_t wire) noexcept {
    mca_btl_xrc_frag_t *frag = mca_btl_xrc_frag_get(wire <= s->super.btl_eager_limit ? &s->eager_frags : &s->max_frags);
    if (frag == nullptr) return nullptr;
    if (frag->capacity < wire) {
        mca_btl_xrc_frag_return(frag);
        return nullptr;
    }
    frag->module = s;
    frag->endpoint = to;
    frag->segment.seg_len = wire;
    frag->base.des_flags = MCA_BTL_DES_FLAGS_BTL_OWNERSHIP | MCA_BTL_DES_SEND_ALWAYS_CALLBACK;
    frag->base.order = order;
    return frag;
}

// Sends `frag`'s message (as prepared by its owner: header and payload in its segment) over the sibling its
// endpoint forwards to. The original stays with its owner until the copy completes. `again`: it was posted on
// the lost rail and its completion failed (the receiver checks whether that rail delivered it).
int forward(mca_btl_xrc_frag_t *frag, mca_btl_base_tag_t tag, bool again) noexcept {
    mca_btl_base_endpoint_t *to = frag->endpoint->forward_to;
    mca_btl_xrc_module_t *s = to->module;
    const size_t length = frag->segment.seg_len;
    mca_btl_xrc_frag_t *copy = copy_frag(s, to, frag->base.order, length + sizeof(ForwardedHeader));
    if (copy == nullptr) return OPAL_ERR_OUT_OF_RESOURCE;
    auto *out = static_cast<unsigned char *>(copy->segment.seg_addr.pval);
    ForwardedHeader header{};
    const xrc::PortAddress &lost = frag->module->transport->address();
    std::memcpy(header.subnet_prefix, lost.gid, sizeof(header.subnet_prefix));
    header.tag = tag;
    if (again) {
        header.stream = frag->ring ? kRing : kSrq;
        header.lid = lost.lid;
        header.ini_qpn = frag->endpoint->ini_qpn;
        header.seq = frag->seq;
        header.rank = mca_btl_xrc_component.job->my_rank;
    }
    std::memcpy(out, &header, sizeof(header));
    std::memcpy(out + sizeof(header), frag->segment.seg_addr.pval, length);
    copy->base.des_cbfunc = forwarded_complete;
    copy->base.des_cbdata = frag;
    ++frag->module->counters.failover_sends;
    const int rc = s->super.btl_send(&s->super, to, &copy->base, kForwardedTag);
    if (rc < 0) mca_btl_xrc_frag_return(copy);
    return rc;
}

// Completion of a send under failover: one that failed with its rail is sent again over another one.
void failover_send_complete(xrc::SendOp *op, ibv_wc_status status) noexcept {
    mca_btl_xrc_frag_t *frag = frag_of(op);
    if (OPAL_UNLIKELY(status != IBV_WC_SUCCESS) && !frag->module->finalizing) {
        if (mca_btl_xrc_fail_over(frag->module, frag->endpoint, ibv_wc_status_str(status))) {
            if (forward(frag, frag->tag, true) >= 0) return;
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

// btl_send with several rails: the fragment is kept until its completion (it is what is sent again if the rail
// fails), but ob1 may hear at the post that it is sent (`threads`: not with MPI_THREAD_MULTIPLE, below).
template <bool threads>
[[gnu::always_inline]] inline int failover_send_body(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                                                     mca_btl_base_descriptor_t *des, mca_btl_base_tag_t tag) noexcept {
    auto *m = as_xrc(btl);
    auto *frag = reinterpret_cast<mca_btl_xrc_frag_t *>(des);
    frag->endpoint = endpoint;
    frag->tag = tag;
    if (OPAL_UNLIKELY(endpoint->forward_to != nullptr)) return forward(frag, tag, false);
    xrc::Peer &peer = endpoint->peer;
    auto *data = static_cast<unsigned char *>(frag->segment.seg_addr.pval);
    const bool ring =
        peer.prepare(frag->op, data, static_cast<uint32_t>(frag->segment.seg_len), frag->lkey, tag, frag->capacity);
    frag->op.on_complete = failover_send_complete;
    if (OPAL_UNLIKELY(peer.queue->post_or_queue(frag->op) != 0)) {
        peer.unprepare(frag->op, ring);
        if (mca_btl_xrc_fail_over(m, endpoint, "the connection to this peer has failed"))
            return forward(frag, tag, false);
        mca_btl_xrc_report_error(m, endpoint, "the connection to this peer has failed");
        return OPAL_ERROR;
    }
    // Its place in its stream on this rail, and the INI QP the receiver sees the stream come from (none yet while
    // the connection is made: the last one is kept).
    frag->ring = ring;
    if (ring) {
        frag->seq = endpoint->ring_posted++;
    } else {
        // The first SRQ send over a new connection: the receiver counts this source from 0 again.
        if (OPAL_UNLIKELY((frag->op.wr.imm_data & htonl(xrc::kImmFirst)) != 0)) endpoint->srq_posted = 0;
        frag->seq = endpoint->srq_posted++;
    }
    if (const ibv_qp *qp = peer.queue->qp(); OPAL_LIKELY(qp != nullptr)) endpoint->ini_qpn = qp->qp_num;
    mca_btl_xrc_sent(m, endpoint, ring, frag->segment.seg_len);
    // Ours and nobody asked for a callback: ob1 hears now that it is sent (as from an inline send with one rail),
    // instead of polling for the completion. The fragment stays posted and is sent again if its rail fails; its
    // completion then calls no one and returns it. Not when the application's threads may call MPI at once: there
    // ob1 keeps its callback, because told at the post, multi-threaded jobs on two rails lost a message's
    // completion (docs/benchmarks.md, "Rail failover: cost, runs, a hang with threads"; the cause is not known).
    if (!threads && (frag->base.des_flags & (MCA_BTL_DES_FLAGS_BTL_OWNERSHIP | MCA_BTL_DES_SEND_ALWAYS_CALLBACK)) ==
                        MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) {
        frag->base.des_cbfunc = nullptr;
        return 1;
    }
    return OPAL_SUCCESS;
}

int failover_send(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, mca_btl_base_descriptor_t *des,
                  mca_btl_base_tag_t tag) noexcept {
    return failover_send_body<false>(btl, endpoint, des, tag);
}

int failover_send_locked(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, mca_btl_base_descriptor_t *des,
                         mca_btl_base_tag_t tag) noexcept {
    const BtlXrcLock guard(as_xrc(btl)->lock);
    return failover_send_body<true>(btl, endpoint, des, tag);
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

// How many messages of the stream `header` names this process took off the lost rail (`lost`, our module on it):
// the SRQ messages from the sender's source, or what was consumed from the ring it writes into (0 when it cannot
// say: the copy is then delivered).
uint32_t taken_on(const mca_btl_xrc_module_t *lost, const ForwardedHeader &header) noexcept {
    if (header.stream == kSrq) return lost->srq_taken.of(xrc::SourceCounts::key(header.lid, header.ini_qpn));
    auto it = lost->endpoints->find(header.rank);
    if (it == lost->endpoints->end()) return 0;
    const xrc::EagerRing *ring = it->second->peer.granted;
    return ring != nullptr ? static_cast<uint32_t>(ring->messages()) : 0;
}

// A copy sent again after the lost rail failed its original: true when that rail delivered the original (the
// copy is dropped). What the rail delivered is taken off it first (its completion queue, its rings: they may
// still hold the original), unless another thread is polling it now.
bool delivered_already(mca_btl_xrc_module_t *lost, const ForwardedHeader &header) noexcept {
    if (lost->endpoints == nullptr) return false;
    // Once deep: a copy met while draining does not drain again (the module whose poll called us may be the one
    // that would be drained, and its ring's current message is not released yet).
    static thread_local bool draining = false;
    if (!draining) {
        draining = true;
        if (!opal_using_threads()) {
            mca_btl_xrc_drain_completions(lost);
        } else if (opal_mutex_trylock(lost->lock) == 0) {
            mca_btl_xrc_drain_completions(lost);
            opal_mutex_unlock(lost->lock);
        }
        draining = false;
    }
    if (xrc::judge_replay(header.seq, taken_on(lost, header)) == xrc::ReplayVerdict::duplicate) {
        ++lost->counters.replays_dropped;
        return true;
    }
    ++lost->counters.replays_delivered;
    return false;
}

// A forwarded message arrived (on any rail): to ob1 as the module of the rail it was sent on, on this process's
// side of the same fabric; as the receiving module's if this process has none there (nothing then ties it).
void forwarded_receive(mca_btl_base_module_t *btl, const mca_btl_base_segment_t *segment) {
    ForwardedHeader header;
    if (segment->seg_len < sizeof(header)) return;
    std::memcpy(&header, segment->seg_addr.pval, sizeof(header));
    mca_btl_xrc_module_t *as = as_xrc(btl);
    bool found = false;
    for (const auto &module : mca_btl_xrc_component.modules)
        if (module != nullptr && module->transport != nullptr &&
            std::memcmp(module->transport->address().gid, header.subnet_prefix, sizeof(header.subnet_prefix)) == 0) {
            as = module.get();
            found = true;
        }
    if (header.stream != kNew && found && as != as_xrc(btl) && delivered_already(as, header)) return;
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
    // Room for the forwarding header in front of the largest message ob1 sends (the fragment lists keep their size).
    m->super.btl_max_send_size -= sizeof(ForwardedHeader);
    m->super.btl_eager_limit = std::min(m->super.btl_eager_limit, m->super.btl_max_send_size);
    m->super.btl_rndv_eager_limit = std::min(m->super.btl_rndv_eager_limit, m->super.btl_max_send_size);
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
        const BtlXrcLock guard(m->lock);
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
    const BtlXrcLock guard(m->lock);
    mca_btl_xrc_drain_completions(m);
    m->transport->abandon();
    return true;
}
