// SPDX-License-Identifier: BSD-3-Clause
// The module function table: peers (add_procs/del_procs), send/receive descriptors (alloc, free,
// prepare_src, send, sendi) and finalize. RDMA and atomics are in btl_xrc_rdma.cc, progress in
// btl_xrc_progress.cc.
#include "btl_xrc_eager.h"
#include "btl_xrc_frag.h"
#include "btl_xrc_tsan.h"
#include "btl_xrc_job.h"
#include "btl_xrc_rdma.h"

#include "src/core/finalize.h"
#include "src/core/port_transport.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>

#include <unistd.h>

namespace {

// First add_procs (during MPI_Init, after the fence). Eager mode starts every remote node's connection now,
// through the rank of that node that spreads the TGT QPs evenly; nothing waits for them (sends queue until each
// one is accepted), so nothing here depends on the other nodes having got this far.
void wire_up(mca_btl_xrc_module_t *m) {
    if (m->wired) return;
    m->wired = true;
    mca_btl_xrc_job_t &job = *mca_btl_xrc_component.job;
    if (!job.eager) return;
    const xrc::NodeMap &map = *job.map;
    const xrc::NodeIndex my_node = map.node_of(job.my_rank);
    for (uint32_t n = 0; n < map.node_count(); ++n) {
        const xrc::NodeIndex node{n};
        if (node == my_node) continue;
        const uint32_t owner = map.tgt_owner(job.my_rank, node);
        const xrc::PortAddress *address = job.port_address(owner, m->index);
        if (address != nullptr) m->transport->connect_node(*address, owner);
    }
    BTL_XRC_VERBOSE(10, "btl:xrc: %s:%u: connecting to %zu nodes (eager)", m->transport->device_name().c_str(),
                    m->transport->port_num(), map.node_count() - 1);
}

int add_procs_tables(mca_btl_xrc_module_t *m, mca_btl_base_module_t *btl, size_t nprocs, opal_proc_t **procs,
                     mca_btl_base_endpoint_t **endpoints, opal_bitmap_t *reachable) noexcept;

// A new endpoint of `proc` on the module, owned by its directory from here on, whatever fails after.
mca_btl_base_endpoint_t *make_endpoint(mca_btl_xrc_module_t *m, opal_proc_t *proc) {
    auto endpoint = std::make_unique<mca_btl_base_endpoint_t>();
    endpoint->proc = proc;
    endpoint->module = m;
    endpoint->peer.rank = proc->proc_name.vpid;
    return m->peers.own(std::move(endpoint));
}

// The peer's receive classes hold our largest fragment; reported once per peer otherwise.
bool receive_classes_fit(const xrc::PortAddress &address, const mca_btl_base_module_t *btl, uint32_t rank) {
    if (address.srqs.back().buffer_size >= btl->btl_max_send_size) return true;
    // The peer's receive classes cannot hold our largest fragment (different btl_xrc_receive_queues).
    opal_output(0,
                "btl:xrc: %s: rank %u's largest receive class (%u bytes) is smaller than "
                "btl_xrc_max_send_size (%zu): set the same btl_xrc_receive_queues on every process",
                opal_process_info.nodename, rank, address.srqs.back().buffer_size, btl->btl_max_send_size);
    return false;
}

// A process of another job (MPI_Comm_spawn, connect/accept), with btl_xrc_other_jobs: reached through that job's
// connection manager (xrc::JobManagers), by a connection of its own even on this node (that job's XRC domain is
// not ours, so the loopback pair cannot reach it). No eager RDMA ring toward it: the ring's control messages name
// peers by rank, which is ambiguous across jobs, and such peers are few and usually short-lived.
mca_btl_base_endpoint_t *add_other_job_proc(mca_btl_xrc_module_t *m, mca_btl_base_module_t *btl, opal_proc_t *proc) {
    mca_btl_xrc_job_t &job = *mca_btl_xrc_component.job;
    const uint32_t jobid = proc->proc_name.jobid;
    const uint32_t rank = proc->proc_name.vpid;
    if (mca_btl_base_endpoint_t *known = m->peers.find_other(jobid, rank); known != nullptr) return known;
    const xrc::PortAddress *address = job.other_port_address(jobid, rank, m->index);
    if (address == nullptr || !receive_classes_fit(*address, btl, rank)) return nullptr;
    mca_btl_base_endpoint_t *made = make_endpoint(m, proc);
    made->other_job = true;
    made->jobid = jobid;
    const int index = m->index;
    m->transport->attach_other(jobid, made->peer, *address, rank, [jobid, index](uint32_t r) {
        return mca_btl_xrc_component.job->other_port_address(jobid, r, index);
    });
    BTL_XRC_TSAN_RELEASE(made);  // ob1 hands it to the sending threads (in code TSan does not see)
    m->peers.add_other(jobid, rank, made);
    BTL_XRC_VERBOSE(10, "btl:xrc: %s:%u: rank %u of job %u is reachable (another job)",
                    m->transport->device_name().c_str(), m->transport->port_num(), rank, jobid);
    return made;
}

int xrc_add_procs(mca_btl_base_module_t *btl, size_t nprocs, opal_proc_t **procs, mca_btl_base_endpoint_t **endpoints,
                  opal_bitmap_t *reachable) noexcept {
    auto *m = as_xrc(btl);
    mca_btl_xrc_component.job->modex_done.store(true, std::memory_order_release);
    // Not under the data-path lock: ob1 adds processes under its own lock (mca_bml_lock), which a thread holding
    // ours waits for when a callback meets a process ob1 has not added yet; the tables take their own mutex, and
    // what needs the data-path lock is done by progress (mca_btl_xrc_adopt_endpoints).
    const bool first = !m->wired;
    const int rc = add_procs_tables(m, btl, nprocs, procs, endpoints, reachable);
    mca_btl_xrc_adopt_endpoints(m, false);
    // Eager mode: the connections wire_up recorded are started now, during MPI_Init (the first add_procs, no other
    // thread yet). Never from a later add_procs: ob1 calls it holding mca_bml_lock, and tick() takes the data-path
    // lock around the queues (progress starts what a later one recorded).
    if (first && m->transport->busy()) m->transport->tick();
    return rc;
}

int add_procs_tables(mca_btl_xrc_module_t *m, mca_btl_base_module_t *btl, size_t nprocs, opal_proc_t **procs,
                     mca_btl_base_endpoint_t **endpoints, opal_bitmap_t *reachable) noexcept {
    // A rail given up for good (btl_xrc_failover.cc) still takes new peers, whose traffic it fails over at once
    // (mca_btl_xrc_adopt_endpoints): a peer's message sent over this rail's fabric may arrive forwarded, and ob1
    // looks this module up in the sender's endpoint for some (a PUT names the module its RDMA must go through, and
    // a module ob1 does not know there is a null pointer to it); known, its RDMA here is refused and ob1 moves the
    // data by sends.
    try {
        wire_up(m);
        mca_btl_xrc_job_t &job = *mca_btl_xrc_component.job;
        for (size_t i = 0; i < nprocs; ++i) {
            opal_proc_t *proc = procs[i];
            if (proc->proc_name.jobid != job.jobid) {
                if (!mca_btl_xrc_component.params.other_jobs) continue;  // another BTL reaches them
                if (mca_btl_base_endpoint_t *made = add_other_job_proc(m, btl, proc); made != nullptr) {
                    endpoints[i] = made;
                    if (reachable != nullptr) opal_bitmap_set_bit(reachable, static_cast<int>(i));
                }
                continue;
            }
            const uint32_t rank = proc->proc_name.vpid;
            if (mca_btl_base_endpoint_t *known = mca_btl_xrc_endpoint_for(m, rank); known != nullptr) {
                endpoints[i] = known;
                if (reachable != nullptr) opal_bitmap_set_bit(reachable, static_cast<int>(i));
                continue;
            }
            const xrc::PortAddress *address = job.port_address(rank, m->index);
            if (address == nullptr) continue;  // no xrc on that peer: someone else reaches it
            if (!receive_classes_fit(*address, btl, rank)) continue;
            mca_btl_base_endpoint_t *made = make_endpoint(m, proc);
            // The link's owner, if this peer's node has no link yet: spread over the node's ranks (node_map.h).
            // Same node or not is the HCA port (xrc::link_owner), never the node id, which may be a hash.
            const uint32_t guess = xrc::spread_owner_guess(rank, job.my_rank, job.local_ranks, job.size);
            const uint32_t owner = xrc::link_owner(rank, *address, guess, job.port_address(guess, m->index));
            m->transport->attach(made->peer, *address, owner);
            m->peers.add(rank, made);
            {
                // Listed now; its eager RDMA state joins the module's under the data-path lock.
                const std::lock_guard<std::mutex> tables(mca_btl_xrc_component.tables_mutex);
                m->adopting.push_back(made);
            }
            BTL_XRC_TSAN_RELEASE(made);  // ob1 hands it to the sending threads (in code TSan does not see)
            endpoints[i] = made;
            if (reachable != nullptr) opal_bitmap_set_bit(reachable, static_cast<int>(i));
        }
        return OPAL_SUCCESS;
    } catch (...) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
}

int xrc_del_procs(mca_btl_base_module_t *btl, size_t nprocs, opal_proc_t **,
                  mca_btl_base_endpoint_t **endpoints) noexcept {
    auto *m = as_xrc(btl);
    const BtlXrcLock guard(m->lock);
    for (size_t i = 0; i < nprocs; ++i) {
        mca_btl_base_endpoint_t *endpoint = endpoints[i];
        if (endpoint == nullptr) continue;
        if (endpoint->other_job) {
            // Another job's process: when it was that job's last one here, the job's connections drain and
            // close, and its manager goes with the TGT QPs made for its senders once they closed them.
            const auto left = m->peers.remove_other(endpoint->jobid, endpoint->peer.rank, endpoint);
            if (left == xrc::PeerDirectory<mca_btl_base_endpoint_t>::Left::not_listed) continue;
            m->transport->detach_other(endpoint->jobid, endpoint->peer);
            endpoint->proc = nullptr;
            if (left == xrc::PeerDirectory<mca_btl_base_endpoint_t>::Left::last_of_job) {
                m->transport->retire_job(endpoint->jobid);
                BTL_XRC_VERBOSE(10, "btl:xrc: %s:%u: job %u left: its connections close",
                                m->transport->device_name().c_str(), m->transport->port_num(), endpoint->jobid);
            }
            continue;
        }
        if (!m->peers.remove(endpoint->peer.rank, endpoint)) continue;  // left already; still owned until finalize
        {
            const std::lock_guard<std::mutex> tables(mca_btl_xrc_component.tables_mutex);
            m->adopting.erase(std::remove(m->adopting.begin(), m->adopting.end(), endpoint), m->adopting.end());
        }
        mca_btl_xrc_eager_endpoint_fini(endpoint);
        m->transport->detach(endpoint->peer);
        endpoint->proc = nullptr;
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

mca_btl_base_descriptor_t *xrc_prepare_src(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                                           opal_convertor_t *convertor, uint8_t order, size_t reserve, size_t *size,
                                           uint32_t flags) noexcept {
    size_t max_data = *size;
    if (reserve + max_data > btl->btl_max_send_size) max_data = btl->btl_max_send_size - reserve;
    auto *des = xrc_alloc(btl, endpoint, order, reserve + max_data, flags);
    if (des == nullptr) return nullptr;
    auto *frag = reinterpret_cast<mca_btl_xrc_frag_t *>(des);
    if (!mca_btl_xrc_pack(convertor, static_cast<unsigned char *>(frag->segment.seg_addr.pval) + reserve, &max_data)) {
        mca_btl_xrc_frag_return(frag);
        return nullptr;
    }
    *size = max_data;
    frag->segment.seg_len = reserve + max_data;
    return des;
}

constexpr xrc::SendCompletionFn send_complete = mca_btl_xrc_send_complete;

// btl_send of a process without threads (mca_btl_xrc_module_init); xrc_send has it inlined under the module's lock
// (one body each, without passing the arguments on). keep: under ULFM, where a link's queue sends again what
// followed a refused request, so it keeps a copy of each inline send nobody owns (SendQueue::keep_copies: every
// queue of the transport has them); chosen once at btl_init, so that the sends without ULFM test nothing for it.
template <bool keep = false>
[[gnu::always_inline]] inline int send_unlocked(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                                                mca_btl_base_descriptor_t *des, mca_btl_base_tag_t tag) noexcept {
    auto *m = as_xrc(btl);
    auto *frag = reinterpret_cast<mca_btl_xrc_frag_t *>(des);
    frag->endpoint = endpoint;
    xrc::Peer &peer = endpoint->peer;
    auto *data = static_cast<unsigned char *>(frag->segment.seg_addr.pval);
    const bool ring =
        peer.prepare(frag->op, data, static_cast<uint32_t>(frag->segment.seg_len), frag->lkey, tag, frag->capacity);
    // Inline and nobody asked for a callback: the data is in the work request, the fragment is free at once.
    if (frag->op.sge.length <= m->transport->max_inline() && !(des->des_flags & MCA_BTL_DES_SEND_ALWAYS_CALLBACK)) {
        frag->op.wr.send_flags = IBV_SEND_INLINE;
        frag->op.on_complete = nullptr;
        // The fragment may go back to its list at once: what the queue keeps is a copy.
        if ((keep ? peer.queue->try_post_copy(frag->op) : peer.queue->try_post(frag->op)) == 0) {
            // Counted before the fragment goes back: another thread may take it from the list at once.
            mca_btl_xrc_sent(m, endpoint, ring, frag->segment.seg_len);
            if (des->des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) mca_btl_xrc_frag_return(frag);
            return 1;
        }
        frag->op.wr.send_flags = 0;
    }
    // Posted now, or queued (credit, or a connection being made): what ob1 hears, mca_btl_xrc_told_at_post. ob1
    // sends eager messages over 256 bytes through here, never sendi: told through the callback, a blocking MPI_Send
    // under threads waits for whichever thread polls the completion to wake it.
    const bool told_now = mca_btl_xrc_told_at_post(des, peer.queue->ready());
    frag->op.on_complete = send_complete;
    if (peer.queue->post_or_queue(frag->op) != 0) {
        if (endpoint->dead) return OPAL_ERR_UNREACH;  // the process died: ob1 knows
        mca_btl_xrc_report_error(m, endpoint, "the connection to this peer has failed");
        return OPAL_ERROR;
    }
    mca_btl_xrc_sent(m, endpoint, ring, frag->segment.seg_len);
    return told_now ? 1 : OPAL_SUCCESS;
}

// btl_send of a process with threads: the same under the module's lock.
template <bool keep = false>
int xrc_send(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, mca_btl_base_descriptor_t *des,
             mca_btl_base_tag_t tag) noexcept {
    const BtlXrcLock guard(as_xrc(btl)->lock);
    BTL_XRC_TSAN_ACQUIRE(endpoint);  // published by add_procs, handed to us through ob1
    return send_unlocked<keep>(btl, endpoint, des, tag);
}

// btl_sendi of a process without threads; xrc_sendi has it inlined under the module's lock. keep: as for
// send_unlocked.
template <bool keep = false>
[[gnu::always_inline]] inline int sendi_unlocked(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                                                 opal_convertor_t *convertor, void *header, size_t header_size,
                                                 size_t payload_size, uint8_t order, uint32_t flags,
                                                 mca_btl_base_tag_t tag,
                                                 mca_btl_base_descriptor_t **descriptor) noexcept {
    auto *m = as_xrc(btl);
    const size_t total = header_size + payload_size;
    if (descriptor != nullptr) *descriptor = nullptr;
    xrc::Peer &peer = endpoint->peer;
    if (total > btl->btl_eager_limit) return OPAL_ERR_OUT_OF_RESOURCE;
    if (!peer.queue->ready()) {
        // Not now (no credit, sends queued, or the connection is not made yet): hand ob1 a descriptor to fill and
        // send, which queues in order and makes the connection if there is none (or reports a broken one).
        if (descriptor != nullptr) *descriptor = xrc_alloc(btl, endpoint, order, total, flags);
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    const auto length = static_cast<uint32_t>(total);
    // Packing advances the convertor by what it packed: when the post then fails, ob1 falls back to another send
    // path that must start from the same position. Worked out from where packing left it, only then.
    size_t packed = payload_size;
    auto rewind = [&] {
        if (packed == 0) return;
        size_t position = convertor->bConverted - packed;
        (void)opal_convertor_set_position(convertor, &position);
    };
    // The queue can post (checked above), and an inline message always fits the stack buffer: prepare()'s rule
    // reduces to the ring having room.
    const bool ring_room = peer.eager.can_send(length);
    const uint32_t wire = ring_room ? xrc::eager_wire_size(length) : length;
    if (wire <= m->transport->max_inline()) {
        if constexpr (keep) {
            // Into the copy the queue keeps in the slot of its request, which a link's queue sends again after a
            // refusal (wire <= max_inline() <= kept_bytes()): assembled and prepared there, so nothing is copied.
            xrc::KeptSend &kept = peer.queue->next_kept();
            if (!mca_btl_xrc_assemble(kept.data, header, header_size, convertor, &packed)) return OPAL_ERROR;
            const bool ring = peer.prepare_routed(kept.op, ring_room, kept.data, length, 0, tag);
            kept.op.wr.send_flags = IBV_SEND_INLINE;
            if (peer.queue->post_kept(kept) == 0) {
                mca_btl_xrc_sent(m, endpoint, ring, length);
                return OPAL_SUCCESS;
            }
            peer.unprepare(kept.op, ring);
            rewind();
            return OPAL_ERR_OUT_OF_RESOURCE;
        }
        // Small: assemble on the stack and send inline; nothing to release afterwards (nobody sends it again).
        alignas(8) unsigned char buffer[kInlineBufferSize];
        if (!mca_btl_xrc_assemble(buffer, header, header_size, convertor, &packed)) return OPAL_ERROR;
        xrc::SendOp op(xrc::SendOp::Unfilled::tag);
        const bool ring = peer.prepare_routed(op, ring_room, buffer, length, 0, tag);
        op.wr.send_flags = IBV_SEND_INLINE;
        if (peer.queue->post_ready(op) == 0) {
            mca_btl_xrc_sent(m, endpoint, ring, length);
            return OPAL_SUCCESS;
        }
        peer.unprepare(op, ring);
        rewind();
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    auto *des = xrc_alloc(btl, endpoint, order, total, flags | MCA_BTL_DES_FLAGS_BTL_OWNERSHIP);
    if (des == nullptr) return OPAL_ERR_OUT_OF_RESOURCE;
    auto *frag = reinterpret_cast<mca_btl_xrc_frag_t *>(des);
    auto *data = static_cast<unsigned char *>(frag->segment.seg_addr.pval);
    if (!mca_btl_xrc_assemble(data, header, header_size, convertor, &packed)) {
        mca_btl_xrc_frag_return(frag);
        return OPAL_ERROR;
    }
    const bool ring = peer.prepare_routed(frag->op, ring_room && xrc::eager_wire_size(length) <= frag->capacity, data,
                                          length, frag->lkey, tag);
    frag->op.on_complete = mca_btl_xrc_frag_return_on_complete;  // sendi: nobody waits, the BTL owns it
    if (peer.queue->post_ready(frag->op) != 0) {
        peer.unprepare(frag->op, ring);
        mca_btl_xrc_frag_return(frag);
        rewind();
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    mca_btl_xrc_sent(m, endpoint, ring, length);
    return OPAL_SUCCESS;
}

template <bool keep = false>
int xrc_sendi(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, opal_convertor_t *convertor, void *header,
              size_t header_size, size_t payload_size, uint8_t order, uint32_t flags, mca_btl_base_tag_t tag,
              mca_btl_base_descriptor_t **descriptor) noexcept {
    const BtlXrcLock guard(as_xrc(btl)->lock);
    BTL_XRC_TSAN_ACQUIRE(endpoint);  // published by add_procs, handed to us through ob1
    return sendi_unlocked<keep>(btl, endpoint, convertor, header, header_size, payload_size, order, flags, tag,
                                descriptor);
}

int xrc_register_error(mca_btl_base_module_t *btl, mca_btl_base_module_error_cb_fn_t cb) noexcept {
    as_xrc(btl)->error_cb = cb;
    return OPAL_SUCCESS;
}

}  // namespace

void mca_btl_xrc_send_complete(xrc::SendOp *op, ibv_wc_status status) noexcept {
    mca_btl_xrc_frag_t *frag = frag_of(op);
    // A send to a process that died calls nobody back: ob1 fails the requests that wait on a dead process itself
    // (ULFM), and a completion that reached such a request after the application had it back would end the job
    // ("Send error after request freed"), with any status. Its message went with the process.
    if (frag->base.des_cbfunc != nullptr && !frag->module->finalizing && !frag->endpoint->dead)
        frag->base.des_cbfunc(&frag->module->super, frag->endpoint, &frag->base,
                              status == IBV_WC_SUCCESS ? OPAL_SUCCESS : OPAL_ERROR);
    if (frag->base.des_flags & MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) mca_btl_xrc_frag_return(frag);
}

mca_btl_base_descriptor_t *mca_btl_xrc_alloc(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                                             uint8_t order, size_t size, uint32_t flags) noexcept {
    return xrc_alloc(btl, endpoint, order, size, flags);
}

namespace {

std::uint64_t monotonic_us() {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<std::uint64_t>(now.tv_sec) * 1000000u + static_cast<std::uint64_t>(now.tv_nsec) / 1000u;
}

// The TGT QPs this process made for the peers it failed over from this module, dropped at finalize; returns them.
std::string drop_lost_initiators(mca_btl_xrc_module_t *m) noexcept {
    std::string dropped;
    try {
        for (mca_btl_base_endpoint_t *endpoint : mca_btl_xrc_endpoints_of(m, true)) {
            if (endpoint->forward_to == nullptr) continue;
            const std::string these = m->transport->drop_initiator(endpoint->peer.rank);
            if (!these.empty()) dropped += (dropped.empty() ? "" : "; ") + these;
        }
    } catch (...) {  // out of memory for the list: what was not dropped goes after the peer wait
    }
    return dropped;
}

// The module as finalize's order (src/core/finalize.h) sees it: its transport, and the peers its rail was lost to.
class FinalizingModule final : public xrc::FinalizePort {
public:
    explicit FinalizingModule(mca_btl_xrc_module_t *m) noexcept : m_(m) {}
    bool own_work_finished() noexcept override { return m_->transport->own_work_finished(); }
    bool finished() noexcept override { return m_->transport->finished(); }
    bool abandoned() noexcept override { return m_->transport->abandoned(); }
    std::string leave_other_jobs() noexcept override { return m_->transport->leave_other_jobs(); }
    std::string drop_lost_initiators() noexcept override {
        return m_->counters.failovers != 0 ? ::drop_lost_initiators(m_) : std::string();
    }
    std::string leave_initiators() noexcept override { return m_->transport->leave_initiators(); }
    std::string drop_initiators() noexcept override { return m_->transport->drop_initiators(); }

private:
    mca_btl_xrc_module_t *m_;
};

// Every module, from the first one's finalize on: Open MPI has closed and unloaded ob1 and osc before it finalizes
// a BTL, and this finalize progresses every module, so a completion or a message on a module not finalized yet
// must not call up either.
void stop_calling_up() noexcept {
    static const mca_btl_active_message_callback_t no_receive_callbacks[MCA_BTL_TAG_MAX] = {};
    for (const auto &module : mca_btl_xrc_component.modules) {
        module->finalizing = true;
        module->receive_callbacks = no_receive_callbacks;
    }
    mca_btl_xrc_ft_fini();  // the runtime's thread calls into the modules no more (they may go from here on)
}

// One module's finalize order (src/core/finalize.h) while it runs.
struct FinalizeRun {
    mca_btl_xrc_module_t *m = nullptr;
    std::optional<FinalizingModule> port;
    std::optional<xrc::Finalize> order;
};

// Runs the orders until each is done, progressing every module meanwhile.
void run_orders(std::span<FinalizeRun> runs) noexcept {
    const auto &params = mca_btl_xrc_component.params;
    for (FinalizeRun &run : runs) {
        xrc::FinalizeConfig config;
        config.wait_us = static_cast<std::uint64_t>(params.finalize_wait) * 1000000u;
        config.peer_wait_us = static_cast<std::uint64_t>(params.finalize_peer_wait) * 1000000u;
        config.answer_wait_us = run.m->transport->leaving_wait_us();
        run.port.emplace(run.m);
        run.order.emplace(*run.port, config, monotonic_us());
    }
    for (;;) {
        bool done = true;
        for (FinalizeRun &run : runs) {
            mca_btl_xrc_module_t *m = run.m;
            // A port that stayed down past its grace, or work that failed here (the process will exit with an
            // error, and the peers it cannot reach will not answer): nothing more is waited for.
            run.order->step(monotonic_us(), m->port_failure_reported || m->finalize_errors != 0);
            for (const xrc::FinalizeNote &note : run.order->take_notes())
                BTL_XRC_VERBOSE(note.verbosity, "btl:xrc: %s: %s:%u: %s", opal_process_info.nodename,
                                m->transport->device_name().c_str(), m->transport->port_num(), note.text.c_str());
            done = done && run.order->done();
        }
        if (done) return;
        const int events = mca_btl_xrc_progress_module(runs.front().m);
        mca_btl_xrc_status_tick();
        // Sleeping a little when there was nothing to do leaves the CPU to the node's other ranks we wait for.
        if (events == 0) {
            const timespec pause{0, 200000};
            nanosleep(&pause, nullptr);
        }
    }
}

// One module's order alone (a module Open MPI never had, or no memory for running them together).
void run_alone(mca_btl_xrc_module_t *m) noexcept {
    FinalizeRun run;
    run.m = m;
    run_orders({&run, 1});
}

// What was accepted is delivered: every send queue drains (a connection still being made completes first) and
// every connection is closed; the TGT QPs this process made stay until their initiators closed them too, so a
// sender still draining toward this node loses nothing (the order and bounds: src/core/finalize.h). Errors from
// here on are peers that left: no error callback (Open MPI's error handling is being torn down).
// Every module's order runs at once, from the first module's finalize on (the later ones find theirs done): a rail
// finalized alone would stop answering on its port while the process still waits on another, and a peer that
// connects there to deliver what it holds for us would meet silence, which it cannot tell from a busy process,
// instead of the refusal that says this process is finalizing.
void finalize_every_module(mca_btl_xrc_module_t *called) noexcept {
    if (called->finalizing) return;  // an earlier module's finalize ran them (stop_calling_up marks every module)
    auto &modules = mca_btl_xrc_component.modules;
    if (std::none_of(modules.begin(), modules.end(), [called](const auto &module) { return module.get() == called; })) {
        // A module whose set-up failed at btl_init, never handed to Open MPI: only its own order, the others live on.
        called->finalizing = true;
        called->transport->begin_finalize();
        run_alone(called);
        return;
    }
    stop_calling_up();
    for (const auto &module : modules) module->transport->begin_finalize();  // all refuse new connections now
    std::unique_ptr<FinalizeRun[]> runs(new (std::nothrow) FinalizeRun[modules.size()]);
    if (runs == nullptr) {  // out of memory: one after the other, as a lone rail would
        for (const auto &module : modules) run_alone(module.get());
        return;
    }
    for (std::size_t i = 0; i < modules.size(); ++i) runs[i].m = modules[i].get();
    run_orders({runs.get(), modules.size()});
}

int xrc_finalize(mca_btl_base_module_t *btl) noexcept {
    auto *m = as_xrc(btl);
    finalize_every_module(m);
    mca_btl_xrc_service_stop(m);  // before anything it serves goes
    m->transport->tick();         // what it recorded last (notes, status)
    const uint32_t lost = m->finalize_errors;
    if (m->counters.failovers != 0)
        opal_output(0, "btl:xrc: %s: %s:%u: %s; %llu peer(s) failed over, %llu send(s) went over other rails",
                    opal_process_info.nodename, m->transport->device_name().c_str(), m->transport->port_num(),
                    m->rail_lost ? "rail lost" : "rail lost toward some nodes",
                    static_cast<unsigned long long>(m->counters.failovers),
                    static_cast<unsigned long long>(m->counters.failover_sends));
    mca_btl_xrc_report_counters(m);
    mca_btl_xrc_status_module_done(m);
    mca_btl_xrc_failover_fini(m);  // completions still owed go back to their lists first
    mca_btl_xrc_async_fini(m);
    m->peers.clear();
    mca_btl_xrc_eager_fini(m);
    mca_btl_xrc_frag_lists_fini(m);
    mca_btl_xrc_rdma_fini(m);
    m->transport.reset();  // every QP, the UD channel, SRQs, the XRC domain, CQ and PD, in that order
    if (lost != 0) {
        // Nobody above is left to tell (ob1 and the error handlers are gone), and an exit status of 0 would say
        // every message arrived. The job's launcher sees the failure; the device's objects are released above.
        opal_output(0, "btl:xrc: %s: %u error(s) during MPI_Finalize: exiting with status 1",
                    opal_process_info.nodename, lost);
        fflush(stdout);
        fflush(stderr);
        _exit(EXIT_FAILURE);
    }
    return OPAL_SUCCESS;  // the module's memory stays the component's until it closes
}

}  // namespace

mca_btl_base_endpoint_t *mca_btl_xrc_endpoint_for(const mca_btl_xrc_module_t *m, uint32_t rank) noexcept {
    return m->peers.find(rank);
}

std::vector<mca_btl_base_endpoint_t *> mca_btl_xrc_endpoints_of(const mca_btl_xrc_module_t *m, bool made) {
    return made ? m->peers.made() : m->peers.live();
}

void mca_btl_xrc_adopt_endpoints(mca_btl_xrc_module_t *m, bool locked) noexcept {
    opal_recursive_mutex_t *lock = m->lock;
    const bool threads = opal_using_threads();
    if (threads && !locked && opal_mutex_trylock(lock) != 0) {
        m->transport->raise();  // another thread holds it: progress adopts them
        return;
    }
    std::vector<mca_btl_base_endpoint_t *> adopted;
    {
        const std::lock_guard<std::mutex> tables(mca_btl_xrc_component.tables_mutex);
        adopted.swap(m->adopting);
    }
    for (mca_btl_base_endpoint_t *endpoint : adopted) {
        mca_btl_xrc_eager_endpoint_added(m, endpoint);
        if (OPAL_UNLIKELY(m->rail_lost)) (void)mca_btl_xrc_fail_over(m, endpoint, "the rail was given up");
    }
    if (threads && !locked) opal_mutex_unlock(lock);
}

int mca_btl_xrc_module_init(mca_btl_xrc_module_t *m, bool threads) noexcept {
    // Decided once: no thread but the application's one calls in, so the sends need no lock and no test of
    // opal_using_threads() per message; under ULFM (every queue keeps copies), the sends that assemble into them.
    const bool keep = m->transport->keeps_copies();
    if (!threads) {
        m->super.btl_send = keep ? send_unlocked<true> : send_unlocked<false>;
        m->super.btl_sendi = keep ? sendi_unlocked<true> : sendi_unlocked<false>;
    } else if (keep) {
        m->super.btl_send = xrc_send<true>;
        m->super.btl_sendi = xrc_sendi<true>;
    }
    m->receive_callbacks = mca_btl_base_active_message_trigger;
    m->transport->count_into(&m->counters);
    xrc::count_registration(m->counters, m->transport->counts().receive_bytes);
    int rc = mca_btl_xrc_rdma_init(m);  // the rcache first: the fragment lists register through it
    if (rc == OPAL_SUCCESS) rc = mca_btl_xrc_frag_lists_init(m);
    if (rc == OPAL_SUCCESS) rc = mca_btl_xrc_eager_init(m);
    if (rc == OPAL_SUCCESS && m->transport->cm_event_fd() >= 0) rc = mca_btl_xrc_service_start(m);
    if (rc == OPAL_SUCCESS) mca_btl_xrc_async_init(m);
    return rc;
}

mca_btl_base_module_t mca_btl_xrc_module_template = [] {
    mca_btl_base_module_t m{};
    m.btl_component = &mca_btl_xrc_component.super;
    m.btl_add_procs = xrc_add_procs;
    m.btl_del_procs = xrc_del_procs;
    m.btl_finalize = xrc_finalize;
    m.btl_alloc = xrc_alloc;
    m.btl_free = xrc_free;
    m.btl_prepare_src = xrc_prepare_src;
    m.btl_send = xrc_send<false>;
    m.btl_sendi = xrc_sendi<false>;
    m.btl_put = mca_btl_xrc_put;
    m.btl_get = mca_btl_xrc_get;
    m.btl_atomic_op = mca_btl_xrc_atomic_op;
    m.btl_atomic_fop = mca_btl_xrc_atomic_fop;
    m.btl_atomic_cswap = mca_btl_xrc_atomic_cswap;
    m.btl_flush = mca_btl_xrc_flush;
    m.btl_register_mem = mca_btl_xrc_register_mem;
    m.btl_deregister_mem = mca_btl_xrc_deregister_mem;
    m.btl_register_error = xrc_register_error;
    m.btl_registration_handle_size = sizeof(mca_btl_base_registration_handle_t);
    return m;
}();
