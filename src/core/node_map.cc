// SPDX-License-Identifier: BSD-3-Clause
#include "node_map.h"

namespace xrc {
namespace {

std::string_view short_name(std::string_view host) { return host.substr(0, host.find('.')); }

}  // namespace

NodeMap::NodeMap(std::string_view node_list, const std::vector<std::string> &hostnames) {
    std::size_t start = 0;
    while (start < node_list.size()) {
        std::size_t end = node_list.find(',', start);
        if (end == std::string_view::npos) end = node_list.size();
        if (end > start) nodes_.emplace_back(node_list.substr(start, end - start));
        start = end + 1;
    }
    node_of_rank_.resize(hostnames.size());
    for (std::size_t r = 0; r < hostnames.size(); ++r) {
        std::size_t found = nodes_.size();
        for (std::size_t n = 0; n < nodes_.size() && found == nodes_.size(); ++n)
            if (nodes_[n] == hostnames[r]) found = n;
        for (std::size_t n = 0; n < nodes_.size() && found == nodes_.size(); ++n)
            if (short_name(nodes_[n]) == short_name(hostnames[r])) found = n;
        if (found == nodes_.size()) nodes_.push_back(hostnames[r]);
        node_of_rank_[r] = static_cast<std::uint32_t>(found);
    }
    // Nodes of the list that run none of the job's ranks (e.g. the launch host) take no part.
    std::vector<std::string> used;
    std::vector<std::uint32_t> renumber(nodes_.size(), UINT32_MAX);
    for (auto &node : node_of_rank_) {
        if (renumber[node] == UINT32_MAX) {
            renumber[node] = static_cast<std::uint32_t>(used.size());
            used.push_back(nodes_[node]);
        }
        node = renumber[node];
    }
    nodes_ = std::move(used);
    ranks_on_node_.resize(nodes_.size());
    for (std::size_t r = 0; r < node_of_rank_.size(); ++r)
        ranks_on_node_[node_of_rank_[r]].push_back(static_cast<std::uint32_t>(r));
}

std::vector<std::uint32_t> NodeMap::tgt_qps_owned_by(std::uint32_t rank) const {
    std::vector<std::uint32_t> senders;
    const NodeIndex node = node_of(rank);
    for (std::uint32_t s = 0; s < node_of_rank_.size(); ++s)
        if (tgt_owner(s, node) == rank) senders.push_back(s);
    return senders;
}

}  // namespace xrc
