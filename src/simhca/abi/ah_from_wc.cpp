// SPDX-License-Identifier: BSD-3-Clause
// Address handles from a received completion (UD replies), and the Ethernet L2 resolver providers call.
// Built only on public verbs (ibv_query_port, ibv_query_gid, ibv_create_ah), so it works with whatever
// device the library serves.
// Exported whatever -fvisibility the library is built with: the version script alone decides what is
// local (abi/libibverbs.map).
#pragma GCC visibility push(default)

#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>

namespace {

// Index of GID in the port's table, or -1 (errno ENOENT) when the port does not have it.
int find_sgid_index(struct ibv_context *context, uint8_t port_num, const union ibv_gid &gid)
{
    struct ibv_port_attr port_attr;
    if (ibv_query_port(context, port_num, &port_attr))
        return -1;
    for (int i = 0; i < port_attr.gid_tbl_len; ++i) {
        union ibv_gid entry;
        if (ibv_query_gid(context, port_num, i, &entry))
            continue;
        if (std::memcmp(entry.raw, gid.raw, sizeof gid.raw) == 0)
            return i;
    }
    errno = ENOENT;
    return -1;
}

} // namespace

// The reply goes back where the request came from: DLID = the sender's SLID, and with a GRH the
// destination GID is the sender's GID and the source GID index is the one the request was addressed to.
// This is the InfiniBand rule, the only link layer the software HCA has (RoCE would need the GID type).
int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc, struct ibv_grh *grh,
                        struct ibv_ah_attr *ah_attr)
{
    std::memset(ah_attr, 0, sizeof *ah_attr);
    ah_attr->dlid = wc->slid;
    ah_attr->sl = wc->sl;
    ah_attr->src_path_bits = wc->dlid_path_bits;
    ah_attr->port_num = port_num;

    if (wc->wc_flags & IBV_WC_GRH) {
        if (!grh) {
            errno = EINVAL;
            return -1;
        }
        int index = find_sgid_index(context, port_num, grh->dgid);
        if (index < 0)
            return -1;
        uint32_t version_tclass_flow = ntohl(grh->version_tclass_flow);
        ah_attr->is_global = 1;
        ah_attr->grh.dgid = grh->sgid;
        ah_attr->grh.sgid_index = static_cast<uint8_t>(index);
        ah_attr->grh.flow_label = version_tclass_flow & 0xFFFFF;
        ah_attr->grh.traffic_class = (version_tclass_flow >> 20) & 0xFF;
        ah_attr->grh.hop_limit = 0xFF;
    }
    return 0;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port_num)
{
    struct ibv_ah_attr ah_attr;
    if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &ah_attr))
        return nullptr;
    return ibv_create_ah(pd, &ah_attr);
}

// Only RoCE providers call this (to turn a GID into a MAC and VLAN via the kernel's neighbour table). The
// software HCA's link layer is InfiniBand, so there is no Ethernet address to resolve.
int ibv_resolve_eth_l2_from_gid(struct ibv_context *, struct ibv_ah_attr *, uint8_t[6], uint16_t *)
{
    errno = EOPNOTSUPP;
    return -1;
}
