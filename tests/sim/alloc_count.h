// SPDX-License-Identifier: BSD-3-Clause
// Heap bytes by owner: while an AllocScope names an account, every operator new/delete in this binary is charged to
// it (the bytes malloc really reserved, so container overheads count). The simulator charges each process's
// ConnectionManager calls to that process, and nothing to the simulator's own fakes, so the figure is the real CM's
// own memory per process.
#pragma once

#include <algorithm>
#include <cstdint>

namespace sim {

struct AllocAccount {
    std::int64_t live = 0;
    std::int64_t peak = 0;
    void add(std::int64_t bytes) noexcept {
        live += bytes;
        peak = std::max(peak, live);
    }
};

// The account charged now (null: nobody).
AllocAccount *current_account() noexcept;
void set_current_account(AllocAccount *account) noexcept;

class AllocScope {
public:
    explicit AllocScope(AllocAccount *account) noexcept : saved_(current_account()) { set_current_account(account); }
    ~AllocScope() { set_current_account(saved_); }
    AllocScope(const AllocScope &) = delete;
    AllocScope &operator=(const AllocScope &) = delete;

private:
    AllocAccount *saved_;
};

}  // namespace sim
