// What the component knows about the job: its rank -> node map (built in btl_init from PMIx, before the
// fence) and the peers' decoded modex addresses (fetched once, after the fence, when first needed).
#pragma once

#include "btl_xrc.h"

#include "src/core/address.h"
#include "src/core/node_map.h"

#include <memory>
#include <optional>
#include <vector>

struct mca_btl_xrc_job_t {
    std::unique_ptr<xrc::NodeMap> map;
    uint32_t my_rank = 0;
    opal_jobid_t jobid = 0;
    std::vector<std::optional<xrc::ProcessAddress>> addresses;  // by rank; empty until fetched
    std::vector<bool> address_failed;

    // The address of `rank`'s port `port_index`, fetching it from the modex on first use; nullptr if the peer
    // published none (or a malformed one: reported once).
    const xrc::PortAddress *port_address(uint32_t rank, int port_index) noexcept;
};

// btl_xrc_modex.cc
mca_btl_xrc_job_t *mca_btl_xrc_job_create(std::string &error) noexcept;
int mca_btl_xrc_modex_publish(mca_btl_xrc_module_t **modules, int count) noexcept;
