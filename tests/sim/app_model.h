// SPDX-License-Identifier: BSD-3-Clause
// The application model: which ranks each rank sends to, in the order it first sends to them (that order decides
// the owner of each connection: the first rank of a node a process wants to reach). Ranks are block-mapped:
// node n holds ranks n*P .. n*P+P-1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sim {

enum class Pattern : std::uint8_t { alltoall, stencil, random, ring };

bool parse_pattern(const std::string &name, Pattern &out);
const char *pattern_name(Pattern p) noexcept;

class AppModel {
public:
    AppModel(Pattern pattern, std::uint32_t nodes, std::uint32_t ppn, std::uint32_t random_degree, std::uint64_t seed);
    // The ranks `rank` sends to, in first-send order (off-node and on-node alike; the caller skips its own node).
    void destinations(std::uint32_t rank, std::vector<std::uint32_t> &out) const;
    // Of those, the ones on `node` (the receivers of the first messages over a connection to that node).
    void destinations_on(std::uint32_t rank, std::uint32_t node, std::vector<std::uint32_t> &out) const;
    std::uint32_t ranks() const noexcept { return nodes_ * ppn_; }
    // 3-D stencil process grid.
    std::uint32_t dim(int i) const noexcept { return dims_[i]; }

private:
    Pattern pattern_;
    std::uint32_t nodes_, ppn_, degree_;
    std::uint64_t seed_;
    std::uint32_t dims_[3] = {1, 1, 1};
};

}  // namespace sim
