// SPDX-License-Identifier: BSD-3-Clause
#include "app_model.h"

#include <algorithm>

namespace sim {

bool parse_pattern(const std::string &name, Pattern &out) {
    if (name == "alltoall")
        out = Pattern::alltoall;
    else if (name == "stencil")
        out = Pattern::stencil;
    else if (name == "random")
        out = Pattern::random;
    else if (name == "ring")
        out = Pattern::ring;
    else
        return false;
    return true;
}

const char *pattern_name(Pattern p) noexcept {
    switch (p) {
        case Pattern::alltoall:
            return "alltoall";
        case Pattern::stencil:
            return "stencil";
        case Pattern::random:
            return "random";
        case Pattern::ring:
            return "ring";
    }
    return "?";
}

namespace {
std::uint64_t mix(std::uint64_t x) noexcept {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
}  // namespace

AppModel::AppModel(Pattern pattern, std::uint32_t nodes, std::uint32_t ppn, std::uint32_t random_degree,
                   std::uint64_t seed)
    : pattern_(pattern), nodes_(nodes), ppn_(ppn), degree_(random_degree), seed_(seed) {
    // MPI_Dims_create-like: the most cubic factorisation of the job, x fastest (so a node's block of consecutive
    // ranks is a slab of the grid, as with a row-major rank order).
    std::uint32_t n = ranks();
    std::vector<std::uint32_t> primes;
    for (std::uint32_t f = 2; f * f <= n; ++f)
        while (n % f == 0) {
            primes.push_back(f);
            n /= f;
        }
    if (n > 1) primes.push_back(n);
    std::sort(primes.rbegin(), primes.rend());
    for (std::uint32_t p : primes) *std::min_element(dims_, dims_ + 3) *= p;
    std::sort(dims_, dims_ + 3);
}

void AppModel::destinations(std::uint32_t rank, std::vector<std::uint32_t> &out) const {
    out.clear();
    const std::uint32_t size = ranks();
    switch (pattern_) {
        case Pattern::alltoall:
            // Open MPI's linear and pairwise exchanges: rank+1, rank+2, ... (mod size).
            for (std::uint32_t i = 1; i < size; ++i) out.push_back((rank + i) % size);
            break;
        case Pattern::ring:
            if (size > 1) out.push_back((rank + 1) % size);
            if (size > 2) out.push_back((rank + size - 1) % size);
            break;
        case Pattern::stencil: {
            const std::uint32_t x = rank % dims_[0], y = rank / dims_[0] % dims_[1], z = rank / (dims_[0] * dims_[1]);
            auto at = [&](std::uint32_t a, std::uint32_t b, std::uint32_t c) {
                return a + dims_[0] * (b + dims_[1] * c);
            };
            const std::uint32_t cand[6] = {at((x + dims_[0] - 1) % dims_[0], y, z), at((x + 1) % dims_[0], y, z),
                                           at(x, (y + dims_[1] - 1) % dims_[1], z), at(x, (y + 1) % dims_[1], z),
                                           at(x, y, (z + dims_[2] - 1) % dims_[2]), at(x, y, (z + 1) % dims_[2])};
            for (std::uint32_t r : cand)
                if (r != rank && std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
            break;
        }
        case Pattern::random: {
            std::uint64_t s = mix(seed_ ^ (std::uint64_t{rank} << 20));
            const std::uint32_t want = std::min(degree_, size - 1);
            while (out.size() < want) {
                s = mix(s);
                const std::uint32_t r = static_cast<std::uint32_t>(s % size);
                if (r != rank && std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
            }
            break;
        }
    }
}

void AppModel::destinations_on(std::uint32_t rank, std::uint32_t node, std::vector<std::uint32_t> &out) const {
    if (pattern_ == Pattern::alltoall) {
        out.clear();
        for (std::uint32_t r = node * ppn_; r < (node + 1) * ppn_; ++r)
            if (r != rank) out.push_back(r);
        return;
    }
    std::vector<std::uint32_t> all;
    destinations(rank, all);
    out.clear();
    for (std::uint32_t r : all)
        if (r / ppn_ == node) out.push_back(r);
}

}  // namespace sim
