// SPDX-License-Identifier: BSD-3-Clause
// Descriptors the BTL hands to Open MPI: send fragments (with a registered payload buffer from a free list)
// and RDMA/atomic descriptors. Each embeds the SendOp the transport core posts, so nothing is allocated per
// message.
#pragma once

#include "btl_xrc.h"
#include "btl_xrc_endpoint.h"

#include "src/core/send_queue.h"

#include <cstring>

#include <sys/uio.h>

struct mca_btl_xrc_frag_t {
    mca_btl_base_descriptor_t base;  // must be first: the free list item Open MPI sees
    mca_btl_base_segment_t segment;
    xrc::SendOp op;
    mca_btl_xrc_module_t *module;
    mca_btl_base_endpoint_t *endpoint;
    opal_free_list_t *list;
    uint32_t lkey;
    size_t capacity;
    // The tag it was sent with (several rails only: a send that failed with its rail is sent again over another).
    mca_btl_base_tag_t tag;
    // Several rails: its completion is due from progress with this status (btl_xrc_failover.cc: a forwarded
    // original, or RDMA refused toward a lost rail), linked through op.next_pending meanwhile.
    ibv_wc_status deferred_status;
    // RDMA and atomics
    mca_btl_base_rdma_completion_fn_t rdma_cb;
    void *rdma_context;
    void *rdma_cbdata;
    void *local_address;
    mca_btl_base_registration_handle_t *local_handle;
};

inline mca_btl_xrc_frag_t *frag_of(xrc::SendOp *op) noexcept {
    return reinterpret_cast<mca_btl_xrc_frag_t *>(reinterpret_cast<char *>(op) - offsetof(mca_btl_xrc_frag_t, op));
}

#ifdef BTL_XRC_TSAN
// ThreadSanitizer build (--enable-tsan): Open MPI's free lists are lock-free LIFOs whose ordering comes from
// fences and an acquire-only compare-and-swap, which ThreadSanitizer does not model: it would see no order between
// one thread returning a fragment and another getting it, and report races on every field of it, and on the list's
// own head and links. These two run the lists uninstrumented, as libopen-pal does (btl_xrc_frag_lists_tsan.cc),
// and tell ThreadSanitizer the one order the list guarantees: what a thread wrote to a fragment before returning
// it happens before what the thread that gets it next does. Races on fragments between our own threads elsewhere
// stay visible.
mca_btl_xrc_frag_t *mca_btl_xrc_frag_get(opal_free_list_t *list) noexcept;
void mca_btl_xrc_frag_return(mca_btl_xrc_frag_t *frag) noexcept;
// init_frag (a new fragment made by the list, before it goes into it) calls this last.
void mca_btl_xrc_frag_made(mca_btl_xrc_frag_t *frag) noexcept;
#else
inline mca_btl_xrc_frag_t *mca_btl_xrc_frag_get(opal_free_list_t *list) noexcept {
    return reinterpret_cast<mca_btl_xrc_frag_t *>(opal_free_list_get(list));
}

inline void mca_btl_xrc_frag_return(mca_btl_xrc_frag_t *frag) noexcept {
    opal_free_list_return(frag->list, &frag->base.super);
}

inline void mca_btl_xrc_frag_made(mca_btl_xrc_frag_t *) noexcept {}
#endif

// Completion of a fragment nobody waits for (the BTL owns it): it goes back to its list.
inline void mca_btl_xrc_frag_return_on_complete(xrc::SendOp *op, ibv_wc_status) noexcept {
    mca_btl_xrc_frag_return(frag_of(op));
}

// Hands a received message to its tag's callback. The descriptor is on the stack: a callback that progresses
// again (osc/rdma may) gets its own. `endpoint` is the sender's, when the receive path knows it.
inline void mca_btl_xrc_deliver(mca_btl_xrc_module_t *module, const mca_btl_active_message_callback_t *reg,
                                mca_btl_base_tag_t tag, void *data, size_t length,
                                mca_btl_base_endpoint_t *endpoint = nullptr) {
    mca_btl_base_segment_t segment{};
    segment.seg_addr.pval = data;
    segment.seg_len = length;
    mca_btl_xrc_call_receive_cb(&module->super, reg, endpoint, tag, &segment);
}

// A send fragment's completion: the owner's callback, then the fragment goes back if the BTL owns it.
void mca_btl_xrc_send_complete(xrc::SendOp *op, ibv_wc_status status) noexcept;
// btl_alloc: a send fragment of `size` bytes from the module's lists (null when none is free or it is too large).
mca_btl_base_descriptor_t *mca_btl_xrc_alloc(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                                             uint8_t order, size_t size, uint32_t flags) noexcept;

// Packs up to *size bytes of the convertor's data at `dst`; *size becomes what was packed. False on error.
// Inline: every send calls it.
inline bool mca_btl_xrc_pack(opal_convertor_t *convertor, unsigned char *dst, size_t *size) noexcept {
    if (*size == 0) return true;
    iovec iov{dst, *size};
    uint32_t iov_count = 1;
    return opal_convertor_pack(convertor, &iov, &iov_count, size) >= 0;
}
// The header, then *payload_size bytes from the convertor: what sendi puts on the wire. *payload_size becomes what
// was packed (the convertor advanced by that much). False on error.
inline bool mca_btl_xrc_assemble(unsigned char *dst, const void *header, size_t header_size,
                                 opal_convertor_t *convertor, size_t *payload_size) noexcept {
    std::memcpy(dst, header, header_size);
    return mca_btl_xrc_pack(convertor, dst + header_size, payload_size);
}

// What btl_send tells ob1 of a fragment it posts or queues: 1 ("sent": ob1 completes its request in the calling
// thread, as after an inline send) when the fragment is ours, nobody asked for a callback and the queue posts it at
// once. The callback is then cleared before the post (another thread may poll the completion before btl_send
// returns), and the completion only returns the fragment (with several rails, after it was sent again if its rail
// failed). Queued, ob1 keeps its callback: the sender then waits in progress, which is what gives the queue its
// credits back (a thread sending one message after another polls nothing otherwise).
inline bool mca_btl_xrc_told_at_post(mca_btl_base_descriptor_t *des, bool posts_now) noexcept {
    constexpr uint32_t kOursOrCallback = MCA_BTL_DES_FLAGS_BTL_OWNERSHIP | MCA_BTL_DES_SEND_ALWAYS_CALLBACK;
    if (!posts_now || (des->des_flags & kOursOrCallback) != MCA_BTL_DES_FLAGS_BTL_OWNERSHIP) return false;
    des->des_cbfunc = nullptr;
    return true;
}

// Several rails (btl_xrc_failover.cc): `frag`'s op completes with `status` from the next progress call, under the
// lock (the caller holds it).
void mca_btl_xrc_defer(mca_btl_xrc_module_t *module, mca_btl_xrc_frag_t *frag, ibv_wc_status status) noexcept;

int mca_btl_xrc_frag_lists_init(mca_btl_xrc_module_t *module) noexcept;
void mca_btl_xrc_frag_lists_fini(mca_btl_xrc_module_t *module) noexcept;
