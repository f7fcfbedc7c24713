// SPDX-License-Identifier: BSD-3-Clause
// Two numbers name a node, and they are not interchangeable, so each has its own type (no implicit conversion
// between them or from an integer):
//   NodeId     the launcher's id of a node (PMIx node id), or, when the launcher gives none, a hash of its host name
//              with the top bit set. The same in every process of the job: what modex addresses, the connection
//              manager's links, send queues and the status record carry, as a label only: two nodes may share it
//              (a hash), so "which node" is decided by port_identity() (address.h), never by this.
//   NodeIndex  a position in a NodeMap (node_map.h): the launcher's node list in its order, nodes without ranks left
//              out. Known only in eager mode, and only to the process that built the map.
#pragma once

#include <cstdint>

namespace xrc {

enum class NodeId : std::uint32_t {};
enum class NodeIndex : std::uint32_t {};

constexpr std::uint32_t value_of(NodeId id) noexcept {
    return static_cast<std::uint32_t>(id);
}
constexpr std::uint32_t value_of(NodeIndex index) noexcept {
    return static_cast<std::uint32_t>(index);
}

}  // namespace xrc
