// The PMIx modex: the job's rank -> node map (from the node list and every rank's hostname, both known before the
// fence), publishing this process's address blob inside btl_init, and reading peers' blobs after the fence.
#include "btl_xrc_job.h"

#include "src/core/port_transport.h"

#include <cstdlib>
#include <string>

namespace {

opal_process_name_t name_of(const mca_btl_xrc_job_t &job, uint32_t rank) {
    opal_process_name_t name = OPAL_PROC_MY_NAME;
    name.jobid = job.jobid;
    name.vpid = rank;
    return name;
}

}  // namespace

mca_btl_xrc_job_t *mca_btl_xrc_job_create(std::string &error) noexcept {
    try {
        auto job = std::make_unique<mca_btl_xrc_job_t>();
        job->my_rank = OPAL_PROC_MY_NAME.vpid;
        job->jobid = OPAL_PROC_MY_NAME.jobid;
        opal_process_name_t wildcard = OPAL_PROC_MY_NAME;
        wildcard.vpid = OPAL_VPID_WILDCARD;
        uint32_t size = 0, *size_ptr = &size;
        int rc = OPAL_SUCCESS;
        OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, BTL_XRC_PMIX_JOB_SIZE, &wildcard, &size_ptr, BTL_XRC_PMIX_UINT32);
        if (rc != OPAL_SUCCESS || size == 0) {
            error = "the job size is not available from PMIx";
            return nullptr;
        }
        char *node_list = nullptr;
        OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, BTL_XRC_PMIX_NODE_LIST, &wildcard, &node_list, BTL_XRC_PMIX_STRING);
        std::string nodes = (rc == OPAL_SUCCESS && node_list != nullptr) ? node_list : "";
        free(node_list);
        std::vector<std::string> hosts(size);
        for (uint32_t r = 0; r < size; ++r) {
            opal_process_name_t name = name_of(*job, r);
            char *host = nullptr;
            OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, BTL_XRC_PMIX_HOSTNAME, &name, &host, BTL_XRC_PMIX_STRING);
            if (rc != OPAL_SUCCESS || host == nullptr) {
                error = "the host name of rank " + std::to_string(r) + " is not available from PMIx";
                return nullptr;
            }
            hosts[r] = host;
            free(host);
        }
        job->map = std::make_unique<xrc::NodeMap>(nodes, hosts);
        job->addresses.resize(size);
        job->address_failed.resize(size, false);
        return job.release();
    } catch (...) {
        error = "out of memory building the job's node map";
        return nullptr;
    }
}

int mca_btl_xrc_modex_publish(mca_btl_xrc_module_t **modules, int count) noexcept {
    try {
        xrc::ProcessAddress address;
        for (int i = 0; i < count; ++i) address.ports.push_back(modules[i]->transport->address());
        auto blob = xrc::encode_address(address);
        int rc = OPAL_SUCCESS;
        OPAL_MODEX_SEND(rc, BTL_XRC_PMIX_GLOBAL, &mca_btl_xrc_component.super.btl_version, blob.data(), blob.size());
        BTL_XRC_VERBOSE(10, "btl:xrc: published a %zu-byte address (%d port(s), %zu nodes)", blob.size(), count,
                        address.ports.empty() ? size_t{0} : address.ports[0].ini_qp_by_node.size());
        return rc;
    } catch (...) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
}

const xrc::PortAddress *mca_btl_xrc_job_t::port_address(uint32_t rank, int port_index) noexcept {
    if (rank >= addresses.size() || address_failed[rank]) return nullptr;
    if (!addresses[rank]) {
        try {
            opal_process_name_t name = name_of(*this, rank);
            uint8_t *data = nullptr;
            size_t size = 0;
            int rc = OPAL_SUCCESS;
            OPAL_MODEX_RECV(rc, &mca_btl_xrc_component.super.btl_version, &name, reinterpret_cast<void **>(&data),
                            &size);
            if (rc != OPAL_SUCCESS || data == nullptr) {
                // The peer has no usable xrc port: not an error, it is just not reachable through xrc.
                BTL_XRC_VERBOSE(10, "btl:xrc: rank %u published no xrc address", rank);
                address_failed[rank] = true;
                return nullptr;
            }
            xrc::ProcessAddress decoded;
            const std::string why = xrc::decode_address({data, size}, decoded);
            free(data);
            if (!why.empty()) {
                opal_output(0, "btl:xrc: %s: ignoring rank %u's malformed xrc address: %s",
                            opal_process_info.nodename, rank, why.c_str());
                address_failed[rank] = true;
                return nullptr;
            }
            addresses[rank] = std::move(decoded);
        } catch (...) {
            return nullptr;
        }
    }
    const auto &ports = addresses[rank]->ports;
    return port_index < static_cast<int>(ports.size()) ? &ports[port_index] : nullptr;
}
