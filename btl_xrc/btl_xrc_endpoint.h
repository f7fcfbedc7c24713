// SPDX-License-Identifier: BSD-3-Clause
// The BTL endpoint: one peer process as this module sees it (created by add_procs). Everything about sending to
// the peer is its xrc::Peer (src/core/peer.h): route, send queue, eager ring channel and handshake, connection
// flags.
#pragma once

#include "btl_xrc.h"

#include "src/core/peer.h"

struct mca_btl_base_endpoint_t {
    opal_proc_t *proc;
    mca_btl_xrc_module_t *module;
    xrc::Peer peer;
    // The ring we granted this peer (it writes into it), or null; peer.granted points into it.
    struct mca_btl_xrc_eager_ring_t *eager_ring = nullptr;
};
