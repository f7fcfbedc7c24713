// SPDX-License-Identifier: BSD-3-Clause
// Memory the HCA or the peers write into: zeroed, page-aligned bytes registered on a PD, counted as registered
// while the registration lives. One owner for both: reset() (or the destructor) deregisters, counts that, and
// frees, once. Not movable: whoever holds one keeps it in place, and resets it before the PD goes.
#pragma once

#include "counters.h"
#include "result.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

namespace xrc {

class RegisteredBlock {
public:
    RegisteredBlock() = default;
    RegisteredBlock(const RegisteredBlock &) = delete;
    RegisteredBlock &operator=(const RegisteredBlock &) = delete;
    ~RegisteredBlock() { reset(); }

    // Allocates `bytes` zeroed bytes on a page boundary (whatever it held before is released). Out of memory: an
    // Error of kind resource, made without allocating.
    Result<void> allocate(std::size_t bytes) noexcept {
        reset();
        memory_.reset(static_cast<unsigned char *>(::operator new[](bytes, std::align_val_t{kPage}, std::nothrow)));
        if (memory_ == nullptr) return Error::out_of_memory("cannot allocate memory to register");
        std::memset(memory_.get(), 0, bytes);
        bytes_ = bytes;
        return {};
    }
    // Registers the allocated bytes on `pd` with `access`, counted in `counters` (which must outlive the
    // registration). A system Error (errnum(): the provider's errno) when the provider refuses; the memory stays
    // allocated.
    Result<void> register_on(ibv_pd *pd, int access, Counters &counters) noexcept {
        if (memory_ == nullptr || mr_ != nullptr)
            return Error::fixed(ErrorKind::gone, "nothing allocated to register, or registered already");
        mr_ = ibv_reg_mr(pd, memory_.get(), bytes_, access);
        if (mr_ == nullptr) return Error::fixed(ErrorKind::system, "ibv_reg_mr failed", errno);
        counters_ = &counters;
        count_registration(counters, bytes_);
        return {};
    }
    // Deregisters (counted only when the provider agrees, as the registered bytes are then really gone) and frees.
    void reset() noexcept {
        if (mr_ != nullptr && ibv_dereg_mr(mr_) == 0) count_deregistration(*counters_, bytes_);
        mr_ = nullptr;
        counters_ = nullptr;
        memory_.reset();
        bytes_ = 0;
    }

    unsigned char *data() const noexcept { return memory_.get(); }
    std::size_t size() const noexcept { return bytes_; }
    bool registered() const noexcept { return mr_ != nullptr; }
    std::uint32_t lkey() const noexcept { return mr_->lkey; }
    std::uint32_t rkey() const noexcept { return mr_->rkey; }

private:
    static constexpr std::size_t kPage = 4096;
    struct PageDelete {
        void operator()(unsigned char *p) const noexcept { ::operator delete[](p, std::align_val_t{kPage}); }
    };

    std::unique_ptr<unsigned char[], PageDelete> memory_;
    std::size_t bytes_ = 0;
    ibv_mr *mr_ = nullptr;
    Counters *counters_ = nullptr;
};

}  // namespace xrc
