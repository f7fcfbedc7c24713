// SPDX-License-Identifier: BSD-3-Clause
// Which process runs on which node, known inside btl_init (before the modex fence) from the job's node list
// and every peer's hostname. It decides the XRC topology: one INI QP per (process, node), and for every sending
// process one TGT QP per node, created by one "owner" rank of that node (the others open it).
#pragma once

#include "node_id.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xrc {

// On demand there is no node map: the owner of the link to a peer's node is chosen from what a process knows, the
// peer's rank. The first peer wanted there would do (it takes part anyway to receive that message), but in a dense
// exchange every process first wants the same rank of each node (rank+1, rank+2, ...: the node's first rank), which
// then makes all of its node's TGT QPs in a row and takes every CONNECT into one UD receive queue (docs/connections.md,
// "At scale"). So: the rank at this process's index among `local_ranks` block-mapped
// ranks on the peer's node, as eager mode's tgt_owner() spreads them. A guess: the caller checks that the rank is on
// the peer's node (its modex address says) and keeps `peer` otherwise (another mapping, another node size).
constexpr std::uint32_t spread_owner_guess(std::uint32_t peer, std::uint32_t sender, std::uint32_t local_ranks,
                                           std::uint32_t job_size) noexcept {
    if (local_ranks == 0) return peer;
    const std::uint32_t guess = peer - peer % local_ranks + sender % local_ranks;
    return guess < job_size ? guess : peer;
}

class NodeMap {
public:
    // node_list: comma-separated host names (PMIx OPAL_PMIX_NODE_LIST); hostnames[r]: host of rank r.
    // Hosts are matched exactly, else by their short name (before the first dot); a host missing from the
    // list is appended, so the map always covers every rank.
    NodeMap(std::string_view node_list, const std::vector<std::string> &hostnames);

    std::size_t node_count() const noexcept { return nodes_.size(); }
    std::size_t rank_count() const noexcept { return node_of_rank_.size(); }
    NodeIndex node_of(std::uint32_t rank) const noexcept { return NodeIndex{node_of_rank_[rank]}; }
    const std::vector<std::uint32_t> &ranks_on(NodeIndex node) const noexcept { return ranks_on_node_[value_of(node)]; }
    const std::string &node_name(NodeIndex node) const noexcept { return nodes_[value_of(node)]; }

    // The rank of `node` that creates the TGT QP through which `sender` reaches that node. Spreads the TGT QPs
    // evenly over the node's ranks.
    std::uint32_t tgt_owner(std::uint32_t sender, NodeIndex node) const noexcept {
        const auto &ranks = ranks_on_node_[value_of(node)];
        return ranks[sender % ranks.size()];
    }

    // Senders whose TGT QP `rank` creates on its node (every rank of the job, the node's own included: on-node
    // traffic goes through the HCA's loopback when the BTL is used for it).
    std::vector<std::uint32_t> tgt_qps_owned_by(std::uint32_t rank) const;

private:
    std::vector<std::string> nodes_;
    std::vector<std::uint32_t> node_of_rank_;  // NodeIndex values
    std::vector<std::vector<std::uint32_t>> ranks_on_node_;
};

}  // namespace xrc
