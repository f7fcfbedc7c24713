// The module function table. At this stage the module owns its device port but does not carry traffic yet:
// add_procs reaches no peer, so ob1 routes around it (the data path is issue #5).
#include "btl_xrc.h"

#include "src/core/port_state.h"

namespace {

int xrc_add_procs(mca_btl_base_module_t *, size_t, opal_proc_t **, mca_btl_base_endpoint_t **endpoints,
                  opal_bitmap_t *) noexcept {
    (void)endpoints;
    return OPAL_SUCCESS;  // no peer marked reachable
}

int xrc_del_procs(mca_btl_base_module_t *, size_t, opal_proc_t **, mca_btl_base_endpoint_t **) noexcept {
    return OPAL_SUCCESS;
}

int xrc_finalize(mca_btl_base_module_t *btl) noexcept {
    auto *module = reinterpret_cast<mca_btl_xrc_module_t *>(btl);
    delete module->port;
    module->port = nullptr;
    delete module;
    return OPAL_SUCCESS;
}

int xrc_register_error(mca_btl_base_module_t *, mca_btl_base_module_error_cb_fn_t) noexcept { return OPAL_SUCCESS; }

}  // namespace

mca_btl_xrc_module_t mca_btl_xrc_module_template = [] {
    mca_btl_xrc_module_t m{};
    m.super.btl_component = &mca_btl_xrc_component.super;
    m.super.btl_add_procs = xrc_add_procs;
    m.super.btl_del_procs = xrc_del_procs;
    m.super.btl_finalize = xrc_finalize;
    m.super.btl_register_error = xrc_register_error;
    return m;
}();
