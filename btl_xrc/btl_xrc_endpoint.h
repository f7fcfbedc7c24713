// The BTL endpoint: what this module needs to reach one peer process (created by add_procs).
#pragma once

#include "btl_xrc.h"

#include "src/core/port_transport.h"

struct mca_btl_base_endpoint_t {
    opal_proc_t *proc;
    mca_btl_xrc_module_t *module;
    xrc::PeerRoute route;
};
