// SPDX-License-Identifier: BSD-3-Clause
// The module's free lists: send fragments with registered payloads (registered through the module's rcache,
// so the registration handle is found from the item), and payload-less RDMA/atomic descriptors.
#include "btl_xrc_frag.h"

#include "src/core/eager_rdma.h"

namespace {

int init_frag(opal_free_list_item_t *item, void *ctx) {
    auto *frag = reinterpret_cast<mca_btl_xrc_frag_t *>(item);
    auto *list = static_cast<opal_free_list_t *>(ctx);
    frag->base.des_segments = &frag->segment;
    frag->base.des_segment_count = 1;
    frag->segment.seg_addr.pval = item->ptr;
    frag->segment.seg_len = 0;
    frag->list = list;
    frag->capacity = list->fl_payload_buffer_size;
    frag->lkey =
        item->registration != nullptr ? reinterpret_cast<mca_btl_xrc_reg_t *>(item->registration)->handle.lkey : 0;
    frag->op = xrc::SendOp{};
    frag->op.wr.sg_list = &frag->op.sge;
    frag->op.wr.num_sge = 1;
    mca_btl_xrc_frag_made(frag);
    return OPAL_SUCCESS;
}

int init_list(mca_btl_xrc_module_t *m, opal_free_list_t *list, size_t payload, int num, int max, int inc) {
    return opal_free_list_init(list, sizeof(mca_btl_xrc_frag_t), opal_cache_line_size,
                               OBJ_CLASS(mca_btl_base_descriptor_t), payload, opal_cache_line_size, num, max, inc,
                               nullptr, 0, payload > 0 ? m->rcache : nullptr, init_frag, list);
}

}  // namespace

int mca_btl_xrc_frag_lists_init(mca_btl_xrc_module_t *m) noexcept {
    const auto &P = mca_btl_xrc_component.params;
    // Every list is constructed first, so that a failure part-way leaves nothing half-made behind.
    OBJ_CONSTRUCT(&m->eager_frags, opal_free_list_t);
    OBJ_CONSTRUCT(&m->max_frags, opal_free_list_t);
    OBJ_CONSTRUCT(&m->rdma_frags, opal_free_list_t);
    m->lists_ready = true;
    // Eager fragments have room for an eager RDMA footer behind the largest eager message.
    int rc = init_list(m, &m->eager_frags, xrc::eager_wire_size(static_cast<uint32_t>(m->super.btl_eager_limit)),
                       P.free_list_num, P.free_list_max, P.free_list_inc);
    if (rc == OPAL_SUCCESS)
        rc = init_list(m, &m->max_frags, m->super.btl_max_send_size, P.free_list_num / 4 + 1, P.free_list_max,
                       P.free_list_inc);
    if (rc == OPAL_SUCCESS) rc = init_list(m, &m->rdma_frags, 0, P.free_list_num, P.free_list_max, P.free_list_inc);
    if (rc != OPAL_SUCCESS) mca_btl_xrc_frag_lists_fini(m);
    return rc;
}

void mca_btl_xrc_frag_lists_fini(mca_btl_xrc_module_t *m) noexcept {
    if (!m->lists_ready) return;
    OBJ_DESTRUCT(&m->eager_frags);
    OBJ_DESTRUCT(&m->max_frags);
    OBJ_DESTRUCT(&m->rdma_frags);
    m->lists_ready = false;
}
