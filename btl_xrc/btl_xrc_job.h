// SPDX-License-Identifier: BSD-3-Clause
// What the component knows about the job: its shape (size, this process's node, the connection mode), the peers'
// modex addresses (src/core/address_book.h: fetched from PMIx here when first needed), and in eager mode who runs
// where (to start every node's connection during MPI_Init).
#pragma once

#include "btl_xrc.h"

#include "src/core/address_book.h"
#include "src/core/node_map.h"
#include "src/core/params.h"
#include "src/core/result.h"

#include <memory>
#include <string>

namespace xrc {
class PortTransport;
}

// The transport whose received connection manager datagrams this thread serves, if it is a module's service thread
// doing so (btl_xrc_service.cc): their senders are then looked up without a PMIx call (src/core/address_book.h says
// why).
extern thread_local xrc::PortTransport *mca_btl_xrc_serving;
// Raises the transport being served, so that the next progress call serves it and fetches the addresses the
// service thread wanted (mca_btl_xrc_service_progress).
void mca_btl_xrc_wake_progress() noexcept;

// The address book reads the job's id and size from the shape, constructed before it.
struct mca_btl_xrc_job_t : xrc::JobShape, xrc::AddressBook {
    mca_btl_xrc_job_t();
    std::unique_ptr<xrc::NodeMap> map;  // eager mode only (null on demand)
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
