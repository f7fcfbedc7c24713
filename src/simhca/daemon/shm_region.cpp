// SPDX-License-Identifier: BSD-3-Clause
#include "shm_region.hpp"

#include <cerrno>
#include <sys/mman.h>
#include <unistd.h>
#include <utility>

namespace simhca {

ShmRegion::ShmRegion(ShmRegion &&o) noexcept
    : fd_(std::move(o.fd_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

ShmRegion &ShmRegion::operator=(ShmRegion &&o) noexcept {
    if (this != &o) {
        if (data_) ::munmap(data_, size_);
        fd_ = std::move(o.fd_);
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
    }
    return *this;
}

ShmRegion::~ShmRegion() {
    if (data_) ::munmap(data_, size_);
}

int ShmRegion::create(const char *name, size_t size) {
    size_t page = size_t(::sysconf(_SC_PAGESIZE));
    size = (size + page - 1) / page * page;
    UniqueFd fd(::memfd_create(name, MFD_CLOEXEC));
    if (!fd) return errno;
    if (::ftruncate(fd.get(), off_t(size)) < 0) return errno;
    void *p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) return errno;
    if (data_) ::munmap(data_, size_);
    fd_ = std::move(fd);
    data_ = p;
    size_ = size;
    return 0;
}

} // namespace simhca
