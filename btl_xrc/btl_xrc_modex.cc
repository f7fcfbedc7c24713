// SPDX-License-Identifier: BSD-3-Clause
// The PMIx modex: what the job looks like from btl_init (size, this node's id, the connection mode; in eager mode
// the rank -> node map from the node list and every rank's hostname, all known before the fence), publishing this
// process's fixed-size address blob inside btl_init, and reading peers' blobs after the fence, one peer at a time
// as they are needed.
#include "btl_xrc_job.h"

#include "src/core/port_transport.h"
#include "src/core/text_list.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

opal_process_name_t name_of(const mca_btl_xrc_job_t &job, uint32_t rank) {
    opal_process_name_t name = OPAL_PROC_MY_NAME;
    name.jobid = job.jobid;
    name.vpid = rank;
    return name;
}

// A peer's published address blob, decoded. Empty when it published none (not an error: it is just not reachable
// through xrc) or a malformed one (said, naming `who`).
std::optional<xrc::ProcessAddress> fetch_address(opal_process_name_t name, const std::string &who) {
    uint8_t *data = nullptr;
    size_t bytes = 0;
    int rc = OPAL_SUCCESS;
    OPAL_MODEX_RECV(rc, &mca_btl_xrc_component.super.btl_version, &name, reinterpret_cast<void **>(&data), &bytes);
    const mca_btl_xrc_malloced_t<uint8_t> data_owned(data);
    if (rc != OPAL_SUCCESS || data == nullptr) {
        BTL_XRC_VERBOSE(10, "btl:xrc: %s published no xrc address", who.c_str());
        return std::nullopt;
    }
    auto address = xrc::decode_address({data, bytes});
    if (!address) {
        opal_output(0, "btl:xrc: %s: ignoring the malformed xrc address of %s: %s", opal_process_info.nodename,
                    who.c_str(), address.error().c_str());
        return std::nullopt;
    }
    return std::move(*address);
}

// The launcher's id of this node (btl_xrc_node_id launcher); without one (a launcher that does not say), or with
// btl_xrc_node_id hostname, an FNV-1a hash of the host name with the top bit set (never a small launcher index).
// A label only: two nodes may hash alike, so nothing decides routing or "same node" on it (port_identity does).
// Asked about this process itself, so Slurm's PMIx before 25.05, which answers every rank's PMIX_NODEID with the
// caller's node, still gives the right id here.
xrc::NodeId my_node_id() {
    const char *source = mca_btl_xrc_component.params.node_id;
    if (source == nullptr || std::strcmp(source, "hostname") != 0) {
        uint32_t id = 0, *id_ptr = &id;
        int rc = OPAL_SUCCESS;
        opal_process_name_t me = OPAL_PROC_MY_NAME;
        OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, BTL_XRC_PMIX_NODEID, &me, &id_ptr, BTL_XRC_PMIX_UINT32);
        if (rc == OPAL_SUCCESS) return xrc::NodeId{id};
    }
    uint32_t hash = 2166136261u;  // FNV-1a
    for (const char *c = opal_process_info.nodename; c != nullptr && *c != '\0'; ++c)
        hash = (hash ^ static_cast<unsigned char>(*c)) * 16777619u;
    return xrc::NodeId{hash | 0x80000000u};
}

}  // namespace

uint32_t mca_btl_xrc_job_size() noexcept {
    opal_process_name_t wildcard = OPAL_PROC_MY_NAME;
    wildcard.vpid = OPAL_VPID_WILDCARD;
    uint32_t size = 0, *size_ptr = &size;
    int rc = OPAL_SUCCESS;
    OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, BTL_XRC_PMIX_JOB_SIZE, &wildcard, &size_ptr, BTL_XRC_PMIX_UINT32);
    return rc == OPAL_SUCCESS ? size : 0;
}

mca_btl_xrc_job_t::mca_btl_xrc_job_t()
    : xrc::AddressBook(*this, {.fetch =
                                   [](uint32_t jobid, uint32_t rank) {
                                       opal_process_name_t name = OPAL_PROC_MY_NAME;
                                       name.jobid = jobid;
                                       name.vpid = rank;
                                       std::string who = "rank " + std::to_string(rank);
                                       if (jobid != OPAL_PROC_MY_NAME.jobid) who += " of job " + std::to_string(jobid);
                                       return fetch_address(name, who);
                                   },
                               .serving = [] { return mca_btl_xrc_serving != nullptr; },
                               .wake = mca_btl_xrc_wake_progress}) {}

xrc::Result<std::unique_ptr<mca_btl_xrc_job_t>> mca_btl_xrc_job_create() {
    auto job = std::make_unique<mca_btl_xrc_job_t>();
    job->my_rank = OPAL_PROC_MY_NAME.vpid;
    job->jobid = OPAL_PROC_MY_NAME.jobid;
    job->local_ranks = static_cast<unsigned>(opal_process_info.num_local_peers) + 1;
    job->local_index = static_cast<uint32_t>(std::max(0, static_cast<int>(opal_process_info.my_local_rank)));
    job->my_node_id = my_node_id();
    const uint32_t size = mca_btl_xrc_job_size();
    if (size == 0) {
        return xrc::Error(xrc::ErrorKind::gone, "the job size is not available from PMIx");
    }
    job->size = size;
    opal_process_name_t wildcard = OPAL_PROC_MY_NAME;
    wildcard.vpid = OPAL_VPID_WILDCARD;
    int rc = OPAL_SUCCESS;
    char *node_list = nullptr;
    OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, BTL_XRC_PMIX_NODE_LIST, &wildcard, &node_list, BTL_XRC_PMIX_STRING);
    const mca_btl_xrc_malloced_t<char> node_list_owned(node_list);
    const std::string nodes = (rc == OPAL_SUCCESS && node_list != nullptr) ? node_list : "";
    job->node_count = std::max<std::size_t>(1, xrc::split_list(nodes, ',').size());
    // This node's other ranks: who may hold a TGT QP with its creator (xrc::CmConfig::node_mate_holds).
    char *local_peers = nullptr;
    OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, BTL_XRC_PMIX_LOCAL_PEERS, &wildcard, &local_peers, BTL_XRC_PMIX_STRING);
    const mca_btl_xrc_malloced_t<char> local_peers_owned(local_peers);
    if (rc == OPAL_SUCCESS && local_peers != nullptr)
        for (const std::string_view peer : xrc::split_list(local_peers, ',')) {
            uint32_t rank = 0;
            const auto [end, error] = std::from_chars(peer.data(), peer.data() + peer.size(), rank);
            if (error == std::errc() && end == peer.data() + peer.size() && rank < size && rank != job->my_rank)
                job->node_mates.push_back(rank);
        }
    job->eager = xrc::connects_eagerly(mca_btl_xrc_component.params, job->node_count);
    if (job->eager) {
        // Who runs where, to start every node's connection during MPI_Init: every rank's host name, known
        // before the fence (O(ranks), which the eager threshold bounds).
        std::vector<std::string> hosts(size);
        for (uint32_t r = 0; r < size; ++r) {
            opal_process_name_t name = name_of(*job, r);
            char *host = nullptr;
            OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, BTL_XRC_PMIX_HOSTNAME, &name, &host, BTL_XRC_PMIX_STRING);
            const mca_btl_xrc_malloced_t<char> host_owned(host);
            if (rc != OPAL_SUCCESS || host == nullptr) {
                return xrc::Error(xrc::ErrorKind::gone,
                                  "the host name of rank " + std::to_string(r) + " is not available from PMIx");
            }
            hosts[r] = host;
        }
        job->map = std::make_unique<xrc::NodeMap>(nodes, hosts);
    }
    return job;
}

int mca_btl_xrc_modex_publish(const mca_btl_xrc_modules_t &modules) noexcept {
    try {
        xrc::ProcessAddress address;
        for (const auto &module : modules) address.ports.push_back(module->transport->address());
        auto blob = xrc::encode_address(address);
        if (xrc::ports_share_default_prefix(address))
            opal_output(0,
                        "btl:xrc: %s: WARNING: %zu ports share the default subnet prefix fe80::, so ports cannot be "
                        "told apart by fabric; if they are separate rails, give each subnet its own prefix (the subnet "
                        "manager's subnet_prefix), or a node with a rail down will pair its peers across fabrics",
                        opal_process_info.nodename, address.ports.size());
        mca_btl_xrc_component.job->publish(address);
        int rc = OPAL_SUCCESS;
        OPAL_MODEX_SEND(rc, BTL_XRC_PMIX_GLOBAL, &mca_btl_xrc_component.super.btl_version, blob.data(), blob.size());
        BTL_XRC_VERBOSE(10, "btl:xrc: published a %zu-byte address (%zu port(s))", blob.size(), modules.size());
        return rc;
    } catch (...) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
}

std::string mca_btl_xrc_job_t::hostname_of(uint32_t rank) noexcept {
    try {
        opal_process_name_t name = name_of(*this, rank);
        char *host = nullptr;
        int rc = OPAL_SUCCESS;
        OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, BTL_XRC_PMIX_HOSTNAME, &name, &host, BTL_XRC_PMIX_STRING);
        const mca_btl_xrc_malloced_t<char> host_owned(host);
        return (rc == OPAL_SUCCESS && host != nullptr) ? host : "?";
    } catch (...) {
        return "?";
    }
}
