// SPDX-License-Identifier: BSD-3-Clause
// Messages between test_import.cpp and simhca-import-peer (import_peer_main.cpp) on their socketpair.
#pragma once
#include <cstdint>

namespace simhca::test {

// Sent with the cmd_fd attached (SCM_RIGHTS).
struct PeerOffer {
    uint32_t pd_handle, mr_handle;
    uint32_t lkey, rkey;
    uint64_t addr, length; // the first process's MR (at least 12 KiB)
    uint32_t foreign_pd_handle; // a PD of another context: must not be importable
    uint32_t pad;
};

struct PeerResult {
    int32_t step; // 0: every check passed, else the first that failed
    int32_t err;  // errno at that point
};

} // namespace simhca::test
