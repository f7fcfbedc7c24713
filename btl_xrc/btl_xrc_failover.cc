// SPDX-License-Identifier: BSD-3-Clause
// Surviving the loss of one rail when a process has more than one (one module per port), mapped onto ob1. ob1 ends
// the job on any error a BTL reports as fatal and keeps choosing every BTL it was given, so failover lives here: a
// module whose rail no longer reaches a peer keeps accepting ob1's sends for it and forwards them, copied into a
// fragment of a sibling module (another rail that reaches the same process). What was queued or in flight on the
// lost rail completes here with an error and is sent again over the sibling: the fragments keep their data until
// their completion, because with several rails no send gives its fragment back at the post (no inline send).
// The decisions (the sibling, the header, numbering, drain and verdict) are the core's: src/core/failover.h and
// src/core/replay_filter.h, which also say why nothing is lost or delivered twice.
//
// A forwarded original is done once its copy is posted: the copy holds everything, so ob1 hears of the original
// at once (a completion owed from inside btl_send is paid from the next progress call), and no fragment of one
// rail ever waits on another's. RDMA toward a lost peer is refused (its registrations are the lost rail's); ob1
// moves the data with sends instead. An atomic is never sent twice: one refused or failed with its rail ends the
// job, saying why.
//
// With a single module none of this runs unless it rides outages past the retry budget (btl_xrc_outage_limit: the
// same rail is its own sibling); otherwise the sends chosen at btl_init are the ones without a test of their own.
// Riding outages on one rail, sendi's inline sends are the copies the queues keep (SendQueue::keep_copies), which a
// timeout hands back to copy_handed_back.
#include "btl_xrc_eager.h"
#include "btl_xrc_frag.h"
#include "btl_xrc_tsan.h"
#include "btl_xrc_job.h"
#include "btl_xrc_rdma.h"

#include "src/core/failover.h"
#include "src/core/port_transport.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>

namespace {

bool failover_on = false;
bool outage_on = false;             // what a timeout hands back goes out again over the same rail's next connection
std::atomic<uint32_t> revivals{0};  // mca_btl_xrc_rail_revivals

constexpr mca_btl_base_tag_t kForwardedTag = MCA_BTL_TAG_BTL + 0x1b;

// A rail that still carries traffic: not given up, not finalizing, its transport open.
bool rail_carries(const mca_btl_xrc_module_t &s) noexcept {
    return !s.rail_lost && !s.finalizing && s.transport != nullptr;
}

// The same peer's endpoint on a rail that still carries its traffic, or null.
mca_btl_base_endpoint_t *sibling_of(const mca_btl_xrc_module_t *m, uint32_t rank) {
    mca_btl_base_endpoint_t *to = nullptr;
    const auto usable = [&](mca_btl_xrc_module_t &s) {
        if (!rail_carries(s)) return false;
        mca_btl_base_endpoint_t *e = mca_btl_xrc_endpoint_for(&s, rank);
        if (e == nullptr || e->forward_to != nullptr || e->peer.queue->broken()) return false;
        to = e;
        return true;
    };
    return xrc::choose_sibling(mca_btl_xrc_component.modules, m, usable) != nullptr ? to : nullptr;
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
    frag->base.des_flags = MCA_BTL_DES_FLAGS_BTL_OWNERSHIP;
    frag->base.des_cbfunc = nullptr;
    frag->base.order = order;
    return frag;
}

// Another rail reaches node `link` leads to: one of its peers has a sibling endpoint that carries.
bool another_rail_reaches(const mca_btl_xrc_module_t *m, const xrc::NodeLink &link) {
    for (const xrc::Peer *peer : link.peers())
        if (sibling_of(m, peer->rank) != nullptr) return true;
    return sibling_of(m, link.owner()) != nullptr;
}

// Another rail carries on-node traffic (through its own port's loopback): it carries, and its port is up.
bool another_rail_carries_on_node(const mca_btl_xrc_module_t *m) {
    const auto up = [](const mca_btl_xrc_module_t &s) { return rail_carries(s) && !s.transport->health().down(); };
    return xrc::choose_sibling(mca_btl_xrc_component.modules, m, up) != nullptr;
}

// Whether another rail carries what `queue` carries: its node's peers (a link's queue) or this node's ranks (the
// loopback queue); nothing for a queue that is neither.
std::optional<bool> another_rail_carries_queue(const mca_btl_xrc_module_t *m, const xrc::SendQueue &queue) {
    if (const xrc::NodeLink *link = m->transport->link_of(queue); link != nullptr)
        return another_rail_reaches(m, *link);
    if (m->transport->is_loopback(queue)) return another_rail_carries_on_node(m);
    return std::nullopt;
}

// Several rails riding outages: only then may a rail's traffic wait for its own path while another could carry it.
bool riding_on_several_rails() noexcept {
    return outage_on && mca_btl_xrc_component.modules.size() > 1;
}

// Sends a copy of `frag`'s message (as prepared by its owner: header and payload in its segment) to `to`: the
// sibling its endpoint forwards to, or the endpoint itself (the same rail's next connection, after a timeout).
// `failed`: its op as it failed (the receiver checks whether that connection delivered it), null when it was never
// sent.
// The same for a message of `length` bytes at `data` that went out (or was to go out) on `from`'s rail.
int forward_message(mca_btl_xrc_module_t *from, const void *data, size_t length, uint8_t order, mca_btl_base_tag_t tag,
                    const xrc::SendOp *failed, mca_btl_base_endpoint_t *to) noexcept {
    mca_btl_xrc_module_t *s = to->module;
    mca_btl_xrc_frag_t *copy = copy_frag(s, to, order, length + sizeof(xrc::ForwardedHeader));
    if (copy == nullptr) return OPAL_ERR_OUT_OF_RESOURCE;
    const xrc::ForwardedHeader header =
        xrc::forwarded_header(from->transport->subnet_prefix(), tag, failed, mca_btl_xrc_component.job->my_rank);
    auto *out = static_cast<unsigned char *>(copy->segment.seg_addr.pval);
    std::memcpy(out, &header, sizeof(header));
    std::memcpy(out + sizeof(header), data, length);
    ++from->counters.failover_sends;
    const int rc = s->super.btl_send(&s->super, to, &copy->base, kForwardedTag);
    if (rc < 0) mca_btl_xrc_frag_return(copy);
    return rc;
}

int forward(mca_btl_xrc_frag_t *frag, mca_btl_base_tag_t tag, const xrc::SendOp *failed,
            mca_btl_base_endpoint_t *to) noexcept {
    return forward_message(frag->module, frag->segment.seg_addr.pval, frag->segment.seg_len, frag->base.order, tag,
                           failed, to);
}

// A send completed with `status`: true when a timeout handed it back (SendQueue::hand_back_after) and it goes out
// again over `endpoint`'s next connection on the same rail (riding outages; the queue closed, not broken).
bool rides_the_outage(mca_btl_base_endpoint_t *endpoint, ibv_wc_status status) noexcept {
    return outage_on && status == IBV_WC_RETRY_EXC_ERR && !endpoint->peer.queue->broken();
}

// An inline send's copy that the queue kept (sendi riding outages on one rail), handed back by a timeout: sent again
// as a fragment's message would be, from the bytes the queue kept, the header naming the connection it was posted
// on and its place there. Only SendQueue::hand_back_after calls it (a timeout, the queue closed, not broken), and
// only when this process rides outages on one rail, so it always rides the outage (rides_the_outage).
void copy_handed_back(xrc::SendOp *op, ibv_wc_status) noexcept {
    xrc::KeptSend &kept = xrc::kept_send_of(*op);
    auto *endpoint = static_cast<mca_btl_base_endpoint_t *>(kept.owner);
    if (endpoint->dead) return;  // its message went with the process (ULFM)
    mca_btl_xrc_module_t *m = endpoint->module;
    if (forward_message(m, kept.data, kept.length, MCA_BTL_NO_ORDER, kept.tag, op, endpoint) >= 0) return;
    mca_btl_xrc_report_error(m, endpoint, "a send whose connection timed out could not be sent again (no fragment)");
}

// Completion of a send under failover: one that failed with its rail is sent again over another one, and its
// owner hears that it is sent.
void failover_send_complete(xrc::SendOp *op, ibv_wc_status status) noexcept {
    mca_btl_xrc_frag_t *frag = frag_of(op);
    // A send to a process that died (refused by its node, or dropped from the queue) is not sent again anywhere:
    // its rail still reaches the others (ULFM).
    if (OPAL_LIKELY(status == IBV_WC_SUCCESS) || frag->endpoint->dead) {
        mca_btl_xrc_send_complete(op, status);
        return;
    }
    // Handed back by a timeout (SendQueue::hand_back_after): the queue waits for its next connection, where the
    // copy goes, numbered for it, the header naming the connection the original may have reached. In MPI_Finalize
    // too: the process still owes what it accepted, and finalize waits for its own sends.
    if (rides_the_outage(frag->endpoint, status)) {
        if (forward(frag, frag->tag, op, frag->endpoint) >= 0) {
            mca_btl_xrc_send_complete(op, IBV_WC_SUCCESS);
            return;
        }
        mca_btl_xrc_report_error(frag->module, frag->endpoint,
                                 "a send whose connection timed out could not be sent again (no fragment)");
        mca_btl_xrc_send_complete(op, status);
        return;
    }
    if (frag->module->finalizing) {
        mca_btl_xrc_send_complete(op, status);
        return;
    }
    if (mca_btl_xrc_fail_over(frag->module, frag->endpoint, ibv_wc_status_str(status))) {
        if (forward(frag, frag->tag, op, frag->endpoint->forward_to) >= 0) {
            mca_btl_xrc_send_complete(op, IBV_WC_SUCCESS);
            return;
        }
        mca_btl_xrc_report_error(frag->module, frag->endpoint,
                                 "a send that failed with its rail could not be sent over another one");
    } else {
        mca_btl_xrc_report_no_other_rail(frag->module, frag->endpoint, frag->endpoint->peer.queue, status);
    }
    mca_btl_xrc_send_complete(op, status);
}

// A send ob1 handed to a rail that no longer reaches its peer: the copy goes now, the original's completion from
// the next progress call (ob1 does not expect its callback from inside btl_send).
int forward_at_post(mca_btl_xrc_frag_t *frag, mca_btl_base_tag_t tag) noexcept {
    const int rc = forward(frag, tag, nullptr, frag->endpoint->forward_to);
    if (rc < 0) return rc;
    frag->op.on_complete = mca_btl_xrc_send_complete;
    mca_btl_xrc_defer(frag->module, frag, IBV_WC_SUCCESS);
    return OPAL_SUCCESS;
}

// The fragment was prepared, numbered and posted (or queued) on its rail: what ob1 is told.
[[gnu::always_inline]] inline void sent(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint,
                                        mca_btl_xrc_frag_t *frag, bool ring) noexcept {
    mca_btl_xrc_sent(m, endpoint, ring, frag->segment.seg_len);
}

// btl_send with several rails: the fragment is kept until its completion (it is what is sent again if the rail
// fails), but ob1 may hear at the post that it is sent (mca_btl_xrc_told_at_post).
[[gnu::always_inline]] inline int failover_send_body(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                                                     mca_btl_base_descriptor_t *des, mca_btl_base_tag_t tag) noexcept {
    auto *m = as_xrc(btl);
    auto *frag = reinterpret_cast<mca_btl_xrc_frag_t *>(des);
    frag->endpoint = endpoint;
    frag->tag = tag;
    if (OPAL_UNLIKELY(endpoint->forward_to != nullptr)) return forward_at_post(frag, tag);
    xrc::Peer &peer = endpoint->peer;
    auto *data = static_cast<unsigned char *>(frag->segment.seg_addr.pval);
    const bool ring =
        peer.prepare(frag->op, data, static_cast<uint32_t>(frag->segment.seg_len), frag->lkey, tag, frag->capacity);
    peer.number(frag->op, ring);
    frag->op.on_complete = failover_send_complete;
    // ob1's callback, kept if the post fails after all (the fragment is then forwarded and completes through it).
    const mca_btl_base_completion_fn_t callback = frag->base.des_cbfunc;
    // The fragment stays posted until its completion and is sent again if its rail fails; ob1 may hear now that it
    // is sent. ob1 handles a 1 from btl_send on each path that can get one (MATCH, RNDV, RGET, FIN; FRAG, ACK and
    // PUT ask for a callback) by completing in the calling thread, with atomic counters (docs/benchmarks.md, "Rail
    // failover: cost, runs, a hang with threads").
    const bool told_now = mca_btl_xrc_told_at_post(des, peer.queue->ready());
    if (OPAL_UNLIKELY(peer.queue->post_or_queue(frag->op) != 0)) {
        frag->base.des_cbfunc = callback;
        peer.unprepare(frag->op, ring);
        peer.streams.unnumber(ring);
        if (endpoint->dead) return OPAL_ERR_UNREACH;  // the process died: ob1 knows
        if (mca_btl_xrc_fail_over(m, endpoint, "the connection to this peer has failed"))
            return forward_at_post(frag, tag);
        mca_btl_xrc_report_unreachable(m, endpoint, endpoint->peer.queue, "the connection to this peer has failed");
        return OPAL_ERROR;
    }
    sent(m, endpoint, frag, ring);
    return told_now ? 1 : OPAL_SUCCESS;
}

int failover_send(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, mca_btl_base_descriptor_t *des,
                  mca_btl_base_tag_t tag) noexcept {
    return failover_send_body(btl, endpoint, des, tag);
}

int failover_send_locked(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, mca_btl_base_descriptor_t *des,
                         mca_btl_base_tag_t tag) noexcept {
    const BtlXrcLock guard(as_xrc(btl)->lock);
    BTL_XRC_TSAN_ACQUIRE(endpoint);  // published by add_procs, handed to us through ob1
    return failover_send_body(btl, endpoint, des, tag);
}

// btl_sendi with several rails: the message is assembled into a fragment that stays until its completion (what is
// sent again if the rail fails), never on the stack. It goes out now when the queue can post, so that ob1's round
// robin over the rails advances once per message; otherwise ob1 gets a descriptor to fill and send (btl_send
// above), which queues in order, or forwards toward a lost rail.
// kept: riding outages on one rail, where every queue keeps copies of its inline sends (SendQueue::keep_copies):
// a message sent inline is assembled into the copy its request takes, numbered, and the copy is what a timeout
// hands back (copy_handed_back), so that it needs neither a fragment nor a completion of its own.
template <bool kept = false>
int failover_sendi(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, opal_convertor_t *convertor,
                   void *header, size_t header_size, size_t payload_size, uint8_t order, uint32_t flags,
                   mca_btl_base_tag_t tag, mca_btl_base_descriptor_t **descriptor) noexcept {
    auto *m = as_xrc(btl);
    const size_t total = header_size + payload_size;
    if (descriptor != nullptr) *descriptor = nullptr;
    if (total > btl->btl_eager_limit) return OPAL_ERR_OUT_OF_RESOURCE;
    xrc::Peer &peer = endpoint->peer;
    if (endpoint->forward_to != nullptr || !peer.queue->ready()) {
        if (descriptor != nullptr) *descriptor = mca_btl_xrc_alloc(btl, endpoint, order, total, flags);
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    if constexpr (kept) {
        const auto length = static_cast<uint32_t>(total);
        const bool ring_room = peer.eager.can_send(length);
        if ((ring_room ? xrc::eager_wire_size(length) : length) <= m->transport->max_inline()) {
            // The queue can post (checked above) and the wire size fits a copy (max_inline() <= kept_bytes()).
            xrc::KeptSend &copy = peer.queue->next_kept();
            size_t packed = payload_size;
            if (!mca_btl_xrc_assemble(copy.data, header, header_size, convertor, &packed)) return OPAL_ERROR;
            const bool ring = peer.prepare_routed(copy.op, ring_room, copy.data, length, 0, tag);
            copy.op.wr.send_flags = IBV_SEND_INLINE;
            peer.number(copy.op, ring);
            copy.op.on_complete = copy_handed_back;
            copy.owner = endpoint;
            copy.length = length;
            copy.tag = tag;
            if (peer.queue->post_kept(copy) == 0) {
                mca_btl_xrc_sent(m, endpoint, ring, length);
                return OPAL_SUCCESS;
            }
            peer.unprepare(copy.op, ring);
            peer.streams.unnumber(ring);
            if (packed > 0) {
                size_t rewind = convertor->bConverted - packed;
                (void)opal_convertor_set_position(convertor, &rewind);
            }
            return OPAL_ERR_OUT_OF_RESOURCE;
        }
    }
    auto *frag = reinterpret_cast<mca_btl_xrc_frag_t *>(
        mca_btl_xrc_alloc(btl, endpoint, order, total, flags | MCA_BTL_DES_FLAGS_BTL_OWNERSHIP));
    if (frag == nullptr) return OPAL_ERR_OUT_OF_RESOURCE;
    auto *data = static_cast<unsigned char *>(frag->segment.seg_addr.pval);
    const size_t position = convertor != nullptr ? convertor->bConverted : 0;
    size_t packed = payload_size;
    if (!mca_btl_xrc_assemble(data, header, header_size, convertor, &packed)) {
        mca_btl_xrc_frag_return(frag);
        return OPAL_ERROR;
    }
    const auto length = static_cast<uint32_t>(total);
    const bool ring = peer.prepare(frag->op, data, length, frag->lkey, tag, frag->capacity);
    peer.number(frag->op, ring);
    frag->tag = tag;
    frag->op.on_complete = failover_send_complete;
    if (peer.queue->post_ready(frag->op) != 0) {
        peer.unprepare(frag->op, ring);
        peer.streams.unnumber(ring);
        mca_btl_xrc_frag_return(frag);
        if (payload_size > 0) {
            size_t rewind = position;
            (void)opal_convertor_set_position(convertor, &rewind);
        }
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    sent(m, endpoint, frag, ring);
    return OPAL_SUCCESS;
}

template <bool kept = false>
int failover_sendi_locked(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, opal_convertor_t *convertor,
                          void *header, size_t header_size, size_t payload_size, uint8_t order, uint32_t flags,
                          mca_btl_base_tag_t tag, mca_btl_base_descriptor_t **descriptor) noexcept {
    const BtlXrcLock guard(as_xrc(btl)->lock);
    BTL_XRC_TSAN_ACQUIRE(endpoint);  // published by add_procs, handed to us through ob1
    return failover_sendi<kept>(btl, endpoint, convertor, header, header_size, payload_size, order, flags, tag,
                                descriptor);
}

// RDMA toward a peer this rail no longer reaches: the registrations (ours and the peer's keys) are this rail's
// protection domain's, so no other rail can carry it. Said once per peer: ob1 moves the data with sends instead,
// but a one-sided window registered on this rail (osc/rdma) has no other way to the peer.
bool rdma_refused(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint) noexcept {
    if (OPAL_LIKELY(endpoint->forward_to == nullptr && !endpoint->peer.queue->broken())) return false;
    if (endpoint->forward_to == nullptr &&
        !mca_btl_xrc_fail_over(m, endpoint, "the connection to this peer has failed"))
        return false;  // no other rail: the operation fails as with one rail
    if (!endpoint->rdma_refusal_said) {
        endpoint->rdma_refusal_said = true;
        opal_output(0,
                    "btl:xrc: %s: %s: RDMA toward rank %u (host %s) refused: the rail is lost toward it and its "
                    "registrations are this rail's; message data goes by sends over %s, one-sided windows "
                    "registered on this rail cannot reach it",
                    opal_process_info.nodename, m->transport->rail_name().c_str(), endpoint->peer.rank,
                    mca_btl_xrc_component.job->hostname_of(endpoint->peer.rank).c_str(),
                    endpoint->forward_to->module->transport->rail_name().c_str());
    }
    return true;
}

// An operation of a one-sided window toward a peer its rail lost (`what`: "an atomic operation", ...): the window
// is registered on that rail only, and the caller would post it again forever. The job ends, saying so.
void refuse_window(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint, const char *what) noexcept {
    char message[256];
    snprintf(message, sizeof(message),
             "%s refused (not executed): the rail is lost toward this peer, and the window it targets is "
             "registered on this rail only, so no other rail can carry it",
             what);
    mca_btl_xrc_report_error(m, endpoint, message);
}

// btl_put and btl_get with several rails. An RDMA toward a peer the rail lost is accepted and completes with an
// error from the next progress call, on which ob1 moves that range by sends; refused at the post, ob1 would leak
// a put's fragment and the registration it took for it (Open MPI 4.1 and 5.0: put_frag_failed sends the data but
// returns the fragment only on the completion path, and the registration aborts the job when the application
// frees the buffer: docs/upstream.md, report 6) and park a get on a list that only completion callbacks retry,
// which the lost rail no longer makes. A one-sided window's RDMA cannot move (refuse_window).
//
// Each is the module's own operation behind a check (Guarded below), one per btl_put/btl_get/atomic entry.
template <auto Operation, const char *What>
struct Guarded;

template <class... Args,
          int (*Rdma)(mca_btl_base_module_t *, mca_btl_base_endpoint_t *, void *, uint64_t,
                      mca_btl_base_registration_handle_t *, Args...) noexcept,
          const char *What>
requires(sizeof...(Args) == 7)  // put and get: remote handle, size, flags, order, callback and its two arguments
    struct Guarded<Rdma, What> {
    static int call(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, void *local_address,
                    uint64_t remote_address, mca_btl_base_registration_handle_t *local_handle, Args... args) noexcept {
        auto *m = as_xrc(btl);
        {
            const BtlXrcLock guard(m->lock);
            BTL_XRC_TSAN_ACQUIRE(endpoint);  // published by add_procs, handed to us through ob1
            if (rdma_refused(m, endpoint)) {
                const std::tuple<Args...> rest(args...);
                if (!mca_btl_xrc_rdma_caller_recovers(btl, endpoint, std::get<5>(rest))) {
                    refuse_window(m, endpoint, What);
                    return OPAL_ERROR;
                }
                return mca_btl_xrc_rdma_refuse(m, endpoint, local_address, local_handle, std::get<4>(rest),
                                               std::get<5>(rest), std::get<6>(rest));
            }
        }
        return Rdma(btl, endpoint, local_address, remote_address, local_handle, args...);
    }
};

// Atomics with several rails: never sent twice, and never over another rail (the window's registration is this
// rail's). One toward a peer this rail no longer reaches was not executed, but nothing else can carry it.
template <class... Args, int (*Atomic)(mca_btl_base_module_t *, mca_btl_base_endpoint_t *, Args...) noexcept,
          const char *What>
requires(sizeof...(Args) != 10)  // not put or get
    struct Guarded<Atomic, What> {
    static int call(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, Args... args) noexcept {
        auto *m = as_xrc(btl);
        bool refused;
        {
            const BtlXrcLock guard(m->lock);
            BTL_XRC_TSAN_ACQUIRE(endpoint);  // published by add_procs, handed to us through ob1
            refused = endpoint->forward_to != nullptr || endpoint->peer.queue->broken();
        }
        if (OPAL_UNLIKELY(refused)) {
            refuse_window(m, endpoint, What);
            return OPAL_ERROR;
        }
        return Atomic(btl, endpoint, args...);
    }
};

constexpr char kPut[] = "an RDMA put of a one-sided window";
constexpr char kGet[] = "an RDMA get of a one-sided window";
constexpr char kAtomicOp[] = "an atomic operation";
constexpr char kAtomicFop[] = "an atomic fetch-and-op";
constexpr char kAtomicCswap[] = "an atomic compare-and-swap";

// A copy whose original went over the rail of `m`: true when that rail delivered the original (the copy is dropped;
// src/core/failover.h decides), after `poll` took what the rail had delivered off its queues. Progress context, under
// the lock (progress holds it: the module's queues are this thread's to poll).
template <class Poll>
bool judged_delivered(mca_btl_xrc_module_t *m, const xrc::ForwardedHeader &header, Poll poll) noexcept {
    constexpr unsigned kDrainBound = 1u << 16;
    const auto taken = [m, &header] {
        const mca_btl_base_endpoint_t *writer = mca_btl_xrc_endpoint_for(m, header.rank);
        return xrc::taken_on(header, m->srq_taken, writer != nullptr ? writer->peer.granted : nullptr);
    };
    const auto undrained = [m] {
        BTL_XRC_VERBOSE(1, "btl:xrc: %s: %s: a rail still delivering after %u polls: a copy is judged anyway",
                        opal_process_info.nodename, m->transport->rail_name().c_str(), kDrainBound);
    };
    return xrc::delivered_already(header, poll, taken, undrained, kDrainBound, m->counters);
}

// A copy sent again after the lost rail (`lost`, our module on it) failed its original: that rail is drained whole
// (its rings and completion queue) before the copy is judged.
bool delivered_already(mca_btl_xrc_module_t *lost, const xrc::ForwardedHeader &header) noexcept {
    if (lost->transport == nullptr) return false;
    return judged_delivered(lost, header, [lost] { return mca_btl_xrc_poll_module(lost); });
}

// A copy sent again over the rail it arrived on (`m`), after a timeout. That connection's SRQ messages came through
// the same completion queue before the copy (the original reached this HCA before the sender's gave up on it, and
// the copy was sent after that), so they are counted already; a ring write may not be consumed yet: the rings are
// read first (never the completion queue, whose batch this copy is part of).
bool delivered_on_this_rail(mca_btl_xrc_module_t *m, const xrc::ForwardedHeader &header) noexcept {
    return judged_delivered(m, header, [m] { return mca_btl_xrc_eager_progress(m); });
}

// A forwarded message arrived (on any rail): to ob1 as the module of the rail it was sent on, on this process's
// side of the same fabric; as the receiving module's if this process has none there (nothing then ties it).
void forwarded_receive(mca_btl_base_module_t *btl, const mca_btl_base_segment_t *segment) {
    const auto header = xrc::read_forwarded_header(segment->seg_addr.pval, segment->seg_len);
    if (!header) {
        BTL_XRC_VERBOSE(1, "btl:xrc: %s: dropped a malformed %zu-byte forwarded message", opal_process_info.nodename,
                        static_cast<size_t>(segment->seg_len));
        return;
    }
    mca_btl_xrc_module_t *found = xrc::rail_on_fabric(
        mca_btl_xrc_component.modules, header->subnet_prefix,
        [](const mca_btl_xrc_module_t &m) { return m.transport != nullptr ? m.transport->subnet_prefix() : nullptr; });
    mca_btl_xrc_module_t *as = found != nullptr ? found : as_xrc(btl);
    if (xrc::stream_of(*header) != xrc::ReplayStream::fresh && found != nullptr &&
        (as != as_xrc(btl) ? delivered_already(as, *header) : delivered_on_this_rail(as, *header)))
        return;
    const size_t length = segment->seg_len - sizeof(*header);
    if (xrc::stream_of(*header) == xrc::ReplayStream::ring && found != nullptr) {
        // The ring its original was written into passes over that span, so that it stands where the writer's
        // writes stopped and the writer may write into it again (EagerManager, Resume).
        if (const mca_btl_base_endpoint_t *writer = mca_btl_xrc_endpoint_for(as, header->rank); writer != nullptr)
            (void)as->eager.skip_copy(writer->peer, header->seq, static_cast<uint32_t>(length));
    }
    const mca_btl_active_message_callback_t *reg = &as->receive_callbacks[header->tag];
    if (reg->cbfunc == nullptr) return;
    mca_btl_xrc_deliver(as, reg, header->tag, static_cast<unsigned char *>(segment->seg_addr.pval) + sizeof(*header),
                        length);
}

// The endpoint's traffic goes to the same peer's endpoint on another rail that carries (failover): what it sends
// from now on is forwarded there. False when no other rail reaches its peer.
bool fail_over_to_sibling(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint) noexcept {
    mca_btl_base_endpoint_t *to = sibling_of(m, endpoint->peer.rank);
    if (to == nullptr) return false;
    endpoint->forward_to = to;
    ++m->counters.failovers;
    return true;
}

// The endpoint's traffic returns to its own rail (failback): what it sends from now on goes over that rail again.
void fail_back(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint) noexcept {
    endpoint->forward_to = nullptr;
    endpoint->rdma_refusal_said = false;
    ++m->counters.failbacks;
}

// The peers behind the same connection as `endpoint`, which broke: none of them can use it any more. One with
// nothing to send now would otherwise learn it only at its next send, or in MPI_Finalize, where the connection's
// close fails and takes it for work lost. They come back with it (mca_btl_xrc_link_revived). Once per break: the
// others forward from then on.
void fail_over_queue_mates(mca_btl_xrc_module_t *m, const mca_btl_base_endpoint_t *endpoint) noexcept {
    try {
        for (mca_btl_base_endpoint_t *mate : mca_btl_xrc_endpoints_of(m, false))
            if (mate != endpoint && mate->peer.queue == endpoint->peer.queue && mate->forward_to == nullptr &&
                !mate->dead && !mate->other_job)
                (void)fail_over_to_sibling(m, mate);
    } catch (...) {  // out of memory: each finds out at its next send, as before
    }
}

// A rail (or a link of one) carries again: the other rails' links riding an outage, or a rail waiting for its port
// past its grace, may hand their traffic to it now rather than wait; their serving threads look
// (btl_xrc_progress.cc).
void rail_carries_again(const mca_btl_xrc_module_t *m) noexcept {
    if (!outage_on) return;
    revivals.fetch_add(1, std::memory_order_relaxed);
    for (const auto &module : mca_btl_xrc_component.modules)
        if (module.get() != m && module->transport != nullptr) module->transport->raise();
}

}  // namespace

void mca_btl_xrc_defer(mca_btl_xrc_module_t *m, mca_btl_xrc_frag_t *frag, ibv_wc_status status) noexcept {
    frag->deferred_status = status;
    m->deferred.push(&frag->op);
    m->transport->raise();
}

void mca_btl_xrc_failover_serve(mca_btl_xrc_module_t *m) noexcept {
    static thread_local std::vector<xrc::SourceKey> closed;
    m->transport->take_closed_sources(closed);  // also with one rail: they are recorded either way
    if (!failover_on) return;
    const BtlXrcLock guard(m->lock);
    // What their senders closed: the connections' last messages are taken first, so that counting them does not
    // make the entries again.
    if (!closed.empty()) {
        (void)xrc::drain_until_empty([m] { return mca_btl_xrc_poll_module(m); }, 1u << 16);
        for (xrc::SourceKey source : closed) m->srq_taken.forget(source);
    }
    m->deferred.complete_all([](xrc::SendOp *op) { op->on_complete(op, frag_of(op)->deferred_status); });
}

void mca_btl_xrc_failover_fini(mca_btl_xrc_module_t *m) noexcept {
    mca_btl_xrc_failover_serve(m);  // finalizing: the fragments go back to their lists, no one is called
}

void mca_btl_xrc_failover_enable(mca_btl_xrc_module_t *m, bool threads, bool outage) noexcept {
    failover_on = true;
    outage_on = outage;
    mca_btl_base_active_message_trigger[kForwardedTag].cbfunc = mca_btl_xrc_receive_adapter<forwarded_receive>;
    mca_btl_base_active_message_trigger[kForwardedTag].cbdata = nullptr;
    m->super.btl_send = threads ? failover_send_locked : failover_send;
    // One rail riding outages keeps copies of its inline sends (the component's choice): sendi assembles into them.
    if (m->transport->keeps_copies())
        m->super.btl_sendi = threads ? failover_sendi_locked<true> : failover_sendi<true>;
    else
        m->super.btl_sendi = threads ? failover_sendi_locked<false> : failover_sendi<false>;
    // Room in front of the largest message ob1 sends for the forwarding headers; the fragment lists keep their size.
    // One per rail a copy may be forwarded over; after a timeout a copy is sent again over the same rail, and a
    // copy whose connection times out too once more: two headers more.
    constexpr std::size_t kOutageHeaders = 2;
    m->super.btl_max_send_size = xrc::forwardable_size(
        m->super.btl_max_send_size, mca_btl_xrc_component.modules.size() + (outage ? kOutageHeaders : 0));
    m->super.btl_eager_limit = std::min(m->super.btl_eager_limit, m->super.btl_max_send_size);
    m->super.btl_rndv_eager_limit = std::min(m->super.btl_rndv_eager_limit, m->super.btl_max_send_size);
    m->super.btl_put = Guarded<mca_btl_xrc_put, kPut>::call;
    m->super.btl_get = Guarded<mca_btl_xrc_get, kGet>::call;
    m->super.btl_atomic_op = Guarded<mca_btl_xrc_atomic_op, kAtomicOp>::call;
    m->super.btl_atomic_fop = Guarded<mca_btl_xrc_atomic_fop, kAtomicFop>::call;
    m->super.btl_atomic_cswap = Guarded<mca_btl_xrc_atomic_cswap, kAtomicCswap>::call;
}

bool mca_btl_xrc_failover_enabled() noexcept {
    return failover_on;
}

bool mca_btl_xrc_outage_enabled() noexcept {
    return outage_on;
}

uint32_t mca_btl_xrc_rail_revivals() noexcept {
    return revivals.load(std::memory_order_relaxed);
}

void mca_btl_xrc_link_revived(mca_btl_xrc_module_t *m, const xrc::NodeLink &link) noexcept {
    if (!failover_on || m->finalizing) return;
    bool any = false;
    try {
        // Every endpoint made: one whose traffic was forwarded may have been unlisted meanwhile (del_procs).
        for (mca_btl_base_endpoint_t *endpoint : mca_btl_xrc_endpoints_of(m, true))
            if (endpoint->forward_to != nullptr && endpoint->peer.queue == &link.queue()) {
                // Over a new connection, numbered from its first message; the copies already forwarded are judged
                // against the old connection's counts, which stay.
                fail_back(m, endpoint);
                any = true;
            }
    } catch (...) {  // out of memory: those peers' traffic stays on the other rail
    }
    if (!any) return;
    rail_carries_again(m);
    m->lost_nodes.forget(link.node());
    BTL_XRC_VERBOSE(1, "btl:xrc: %s: %s: node %u reached again: its peers' traffic is back on this rail",
                    opal_process_info.nodename, m->transport->rail_name().c_str(), link.node());
}

void mca_btl_xrc_choose_outage_ride(mca_btl_xrc_module_t *m, xrc::SendQueue &queue) noexcept {
    if (!riding_on_several_rails()) return;
    if (const std::optional<bool> carried = another_rail_carries_queue(m, queue)) queue.ride_outages(!*carried);
}

void mca_btl_xrc_hand_over_riding(mca_btl_xrc_module_t *m) noexcept {
    if (!riding_on_several_rails()) return;
    m->transport->hand_over_riding([m](const xrc::NodeLink &link) { return another_rail_reaches(m, link); });
}

bool mca_btl_xrc_rejoin_rail(mca_btl_xrc_module_t *m) noexcept {
    if (!failover_on || m->finalizing || !m->rail_lost) return false;
    const BtlXrcLock guard(m->lock);
    if (!m->rail_lost || !m->transport->revive()) return false;  // its links call mca_btl_xrc_link_revived
    // The on-node peers come back over a new loopback pair, numbered from its first message (the copies forwarded
    // before are judged against the old pair's counts, which stay).
    try {
        for (mca_btl_base_endpoint_t *endpoint : mca_btl_xrc_endpoints_of(m, true))
            if (endpoint->forward_to != nullptr && endpoint->peer.link == nullptr && !endpoint->other_job) {
                endpoint->peer.next_connection(xrc::RingAfter::stopped);
                fail_back(m, endpoint);
            }
    } catch (...) {  // out of memory: those peers' traffic stays on the other rail
    }
    m->rail_lost = false;
    m->port_failure_reported = false;
    m->failed_completion[0] = '\0';
    m->failed_queue = nullptr;
    rail_carries_again(m);
    opal_output(0, "btl:xrc: %s: %s: rail back (its port is active again): its traffic returns to it",
                opal_process_info.nodename, m->transport->rail_name().c_str());
    return true;
}

bool mca_btl_xrc_fail_over(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint, const char *why) noexcept {
    if (endpoint->dead) return false;  // no rail reaches a process that died (ULFM), and no rail is lost by it
    if (endpoint->forward_to != nullptr) return true;
    // Another job's process: the other rails know it by (job, rank), which sibling_of does not look up.
    if (!failover_on || m->finalizing || endpoint->other_job) return false;
    if (!fail_over_to_sibling(m, endpoint)) return false;
    if (endpoint->peer.queue->broken()) fail_over_queue_mates(m, endpoint);
    if (m->rail_lost) return true;  // reported once for the whole rail
    try {
        const uint32_t node = endpoint->peer.queue->node();
        if (!m->lost_nodes.first(node)) return true;
        opal_output(0, "btl:xrc: %s: %s: rail lost toward node %u (host %s): %s; traffic toward it continues on %s",
                    opal_process_info.nodename, m->transport->rail_name().c_str(), node,
                    mca_btl_xrc_component.job->hostname_of(endpoint->peer.rank).c_str(), why,
                    endpoint->forward_to->module->transport->rail_name().c_str());
    } catch (...) {  // out of memory for the message: the failover itself is done
    }
    return true;
}

bool mca_btl_xrc_another_rail_serves(const mca_btl_xrc_module_t *m, const xrc::SendQueue &queue) noexcept {
    return mca_btl_xrc_component.modules.size() > 1 && another_rail_carries_queue(m, queue).value_or(false);
}

void mca_btl_xrc_report_unreachable(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint,
                                    const xrc::SendQueue *queue, const char *what) noexcept {
    // Only the completion that broke this queue explains it: another queue's (an earlier failure, another node)
    // would name the wrong QP and peer.
    const bool known = queue != nullptr && m->failed_queue == queue && m->failed_completion[0] != '\0';
    char message[768];
    snprintf(message, sizeof(message), "%s%s%s", what, known ? ": " : "", known ? m->failed_completion : "");
    mca_btl_xrc_report_error(m, endpoint, message);
}

void mca_btl_xrc_report_no_other_rail(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint,
                                      const xrc::SendQueue *queue, ibv_wc_status status) noexcept {
    char what[128];
    snprintf(what, sizeof(what), "a send failed (%s) and no other rail reaches this peer", ibv_wc_status_str(status));
    mca_btl_xrc_report_unreachable(m, endpoint, queue, what);
}

bool mca_btl_xrc_lose_rail(mca_btl_xrc_module_t *m, const char *why) noexcept {
    if (!failover_on || m->finalizing) return false;
    const BtlXrcLock guard(m->lock);
    if (m->rail_lost) return true;
    try {
        const std::vector<mca_btl_base_endpoint_t *> live = mca_btl_xrc_endpoints_of(m, false);
        for (mca_btl_base_endpoint_t *endpoint : live)
            if (endpoint->forward_to == nullptr && sibling_of(m, endpoint->peer.rank) == nullptr) return false;
        m->rail_lost = true;
        for (mca_btl_base_endpoint_t *endpoint : live)
            if (endpoint->forward_to == nullptr) (void)fail_over_to_sibling(m, endpoint);
    } catch (...) {  // out of memory: the rail is not given up, and the job ends as with one rail
        return false;
    }
    try {
        opal_output(0, "btl:xrc: %s: %s: rail lost: %s; traffic continues on %s", opal_process_info.nodename,
                    m->transport->rail_name().c_str(), why,
                    xrc::surviving_rails(
                        mca_btl_xrc_component.modules, m, [](const mca_btl_xrc_module_t &s) { return !s.rail_lost; },
                        [](const mca_btl_xrc_module_t &s) { return s.transport->rail_name(); })
                        .c_str());
    } catch (...) {
    }
    // What the HCA completed is retired first (every send is signaled with several rails); what was queued or in
    // flight without an acknowledgement then completes with an error and goes out again over the other rails.
    mca_btl_xrc_drain_completions(m);
    m->transport->abandon();
    return true;
}
