// SPDX-License-Identifier: BSD-3-Clause
// The fabric file written by `simcluster up` (it plays the subnet manager):
//   node <name> lid <lid>[,<lid of rail 2>,...] addr <ipv4> port <tcp-port>
// Rail r of every node sits on fabric r (a subnet of its own): the r-th LID is the node's port on it, 0 = that
// rail is not cabled. LIDs are unique on one node (across its rails).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace simhca {

struct FabricNode {
    std::string name;
    uint16_t lid = 0;            // rail 1 as loaded: the node's key (a later LID change leaves it)
    std::vector<uint16_t> lids;  // every rail's current LID; lids[0] == lid until a LID change
    std::string addr;
    uint16_t port = 0;
};

// Returns false with a message in `err` on a malformed file.
bool load_fabric(const std::string &path, std::vector<FabricNode> &out, std::string &err);

}  // namespace simhca
