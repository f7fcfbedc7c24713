// SPDX-License-Identifier: BSD-3-Clause
// A memfd-backed shared region: the daemon creates it, maps it, and hands
// the fd to the library (SCM_RIGHTS), which maps the same pages.
#pragma once
#include <cstddef>
#include "../common/unique_fd.hpp"

namespace simhca {

class ShmRegion {
public:
    ShmRegion() = default;
    ShmRegion(const ShmRegion &) = delete;
    ShmRegion &operator=(const ShmRegion &) = delete;
    ShmRegion(ShmRegion &&o) noexcept;
    ShmRegion &operator=(ShmRegion &&o) noexcept;
    ~ShmRegion();

    // Returns 0 or an errno. Memory starts zeroed.
    int create(const char *name, size_t size);
    void *data() const { return data_; }
    size_t size() const { return size_; }
    int fd() const { return fd_.get(); }

private:
    UniqueFd fd_;
    void *data_ = nullptr;
    size_t size_ = 0;
};

} // namespace simhca
