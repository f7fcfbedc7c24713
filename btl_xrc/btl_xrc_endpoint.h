// SPDX-License-Identifier: BSD-3-Clause
// The BTL endpoint: one peer process as this module sees it (created by add_procs). Everything about sending to
// the peer is its xrc::Peer (src/core/peer.h): route, send queue, eager ring channel and handshake, connection
// flags.
#pragma once

#include "btl_xrc.h"

#include "src/core/peer.h"

#include <type_traits>

struct mca_btl_base_endpoint_t {
    // First: the core names a peer by its xrc::Peer (the writer of an eager ring), and the endpoint is that address.
    xrc::Peer peer;
    opal_proc_t *proc;
    mca_btl_xrc_module_t *module;
    // With several rails: the same peer's endpoint on another rail, once this rail no longer reaches the peer
    // (btl_xrc_failover.cc). Sends on this endpoint then go over that one. Null while this rail carries them.
    mca_btl_base_endpoint_t *forward_to;
    // This rail refused RDMA toward the peer after it was lost, and said so (once).
    bool rdma_refusal_said;
    // The peer process died (User-Level Failure Mitigation, btl_xrc_peer_death.cc): a send to it fails at the post
    // with OPAL_ERR_UNREACH, a send's completion calls nobody back, an RDMA operation's reports OPAL_ERR_UNREACH.
    // Never cleared.
    bool dead;
    // A process of another job (MPI_Comm_spawn, connect/accept): not in the module's rank table, no failover (the
    // other rails' tables are by rank of this job) and no eager RDMA ring.
    bool other_job;
    uint32_t jobid;  // other_job: its job
};
static_assert(std::is_standard_layout_v<mca_btl_base_endpoint_t>, "the endpoint is found from its peer's address");

// The endpoint whose peer `peer` is (null for null).
inline mca_btl_base_endpoint_t *mca_btl_xrc_endpoint_of(xrc::Peer *peer) noexcept {
    return reinterpret_cast<mca_btl_base_endpoint_t *>(peer);
}
