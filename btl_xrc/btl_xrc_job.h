// SPDX-License-Identifier: BSD-3-Clause
// What the component knows about the job: its size, this process's node, the connection mode, the peers'
// decoded modex addresses (fetched from PMIx when first needed, kept by rank: O(peers contacted)), and in eager
// mode who runs where (to start every node's connection during MPI_Init).
#pragma once

#include "btl_xrc.h"

#include "src/core/address.h"
#include "src/core/node_id.h"
#include "src/core/node_map.h"
#include "src/core/params.h"
#include "src/core/result.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

// True while a module's service thread serves received connection manager datagrams (btl_xrc_service.cc): their
// senders are then looked up without a PMIx call. A datagram can come from a peer that left the modex fence before
// this process did; a PMIx_Get for its blob then goes to the launcher and blocks (on Open MPI 5.0.7 under load, once
// for the whole job) while the service thread holds the connection manager's mutex and the job's addresses_mutex,
// which the main thread's add_procs waits for: this process never leaves MPI_Init.
extern thread_local bool mca_btl_xrc_serving;
// Raises every module's transport, so that the next progress call serves it (mca_btl_xrc_service_progress).
void mca_btl_xrc_wake_progress() noexcept;

struct mca_btl_xrc_job_t : xrc::JobShape {
    std::unique_ptr<xrc::NodeMap> map;  // eager mode only (null on demand)
    xrc::ProcessAddress mine;           // what this process published: one entry per module, in module order
    std::unordered_map<uint32_t, std::optional<xrc::ProcessAddress>> addresses;  // nullopt: none, or malformed
    // Ports whose LID changed since they published it (announced through the connection manager): port_identity()
    // -> the LID it has now, applied to every address fetched later. O(ports that changed).
    std::unordered_map<uint64_t, uint16_t> moved_lids;
    // Guards `addresses`, `mine`, `moved_lids`, `other_addresses` and `wanted`: the service thread looks up the
    // senders of connection requests. Never held across a PMIx call.
    std::mutex addresses_mutex;
    // Peers whose address the service thread needed before any other thread had fetched it: it never fetches (a
    // datagram from such a peer is dropped, and its sender sends it again), progress fetches them
    // (fetch_wanted_addresses). jobid is this job's for its own ranks.
    struct Wanted {
        uint32_t jobid, rank;
    };
    std::vector<Wanted> wanted;
    std::atomic<bool> addresses_wanted{false};
    // This process has left the modex fence (its first add_procs): every rank's address is with its PMIx client
    // from then on, so a look-up made while serving datagrams fetches it without going to the launcher, and a peer
    // that computes still answers a CONNECT from a rank it never added. Before, only what was fetched is read.
    std::atomic<bool> modex_done{false};
    // Progress (never the service thread): fetches what the service thread asked for.
    void fetch_wanted_addresses() noexcept;

    // The address of the port of `rank` that my module `module_index` talks to (the one on the same fabric:
    // xrc::paired_port), fetching the peer's blob from the modex on first use; nullptr if the peer published none
    // (or a malformed one: reported once) or has no port on that module's fabric. On the service thread only what
    // was fetched already: nullptr otherwise, and the peer is fetched by the next progress call.
    const xrc::PortAddress *port_address(uint32_t rank, int module_index) noexcept;
    // The HCA port `port` (port_identity()) moved from LID `old_lid` to `new_lid`: every address of it fetched so far
    // or later says `new_lid` (the pointers port_address() gave out stay valid: updated in place).
    void move_port(uint64_t port, uint16_t old_lid, uint16_t new_lid) noexcept;
    // port_address() for rank `rank` of another job `jobid` (spawned, or connected to), kept by (job, rank). Safe
    // from the service thread (the connection manager of that job looks up its senders), as port_address().
    const xrc::PortAddress *other_port_address(uint32_t jobid, uint32_t rank, int module_index) noexcept;
    std::unordered_map<uint64_t, std::optional<xrc::ProcessAddress>> other_addresses;  // under addresses_mutex
    // The host `rank` runs on, for messages ("?" when PMIx does not say).
    std::string hostname_of(uint32_t rank) noexcept;
};

// btl_xrc_modex.cc
// Number of processes in the job, from PMIx (0 when unknown).
uint32_t mca_btl_xrc_job_size() noexcept;
// The job as PMIx describes it, or why it cannot be known (the BTL then disqualifies itself). Out of memory, it
// throws: btl_init, its caller, catches that.
xrc::Result<std::unique_ptr<mca_btl_xrc_job_t>> mca_btl_xrc_job_create();
int mca_btl_xrc_modex_publish(const mca_btl_xrc_modules_t &modules) noexcept;
