// SPDX-License-Identifier: BSD-3-Clause
// ThreadSanitizer build only (--enable-tsan), compiled without instrumentation: the fragments' free lists as
// libopen-pal runs them, with the order they guarantee told to ThreadSanitizer (see btl_xrc_frag.h).
#include "btl_xrc_frag.h"

#include "btl_xrc_tsan.h"

mca_btl_xrc_frag_t *mca_btl_xrc_frag_get(opal_free_list_t *list) noexcept {
    auto *frag = reinterpret_cast<mca_btl_xrc_frag_t *>(opal_free_list_get(list));
    if (frag != nullptr) BTL_XRC_TSAN_ACQUIRE(frag);
    return frag;
}

void mca_btl_xrc_frag_return(mca_btl_xrc_frag_t *frag) noexcept {
    BTL_XRC_TSAN_RELEASE(frag);
    opal_free_list_return(frag->list, &frag->base.super);
}

void mca_btl_xrc_frag_made(mca_btl_xrc_frag_t *frag) noexcept {
    BTL_XRC_TSAN_RELEASE(frag);
}
