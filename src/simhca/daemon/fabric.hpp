// SPDX-License-Identifier: BSD-3-Clause
// The fabric file written by `simcluster up` (it plays the subnet manager):
//   node <name> lid <lid> addr <ipv4> port <tcp-port>
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace simhca {

struct FabricNode {
    std::string name;
    uint16_t lid = 0;
    std::string addr;
    uint16_t port = 0;
};

// Returns false with a message in `err` on a malformed file.
bool load_fabric(const std::string &path, std::vector<FabricNode> &out, std::string &err);

} // namespace simhca
