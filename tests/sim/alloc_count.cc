// SPDX-License-Identifier: BSD-3-Clause
// The replaceable global allocation functions, charging the current account (single-threaded simulator).
#include "alloc_count.h"

#include <malloc.h>

#include <cstdlib>
#include <new>

namespace sim {
namespace {
AllocAccount *g_account = nullptr;
}
AllocAccount *current_account() noexcept {
    return g_account;
}
void set_current_account(AllocAccount *account) noexcept {
    g_account = account;
}
}  // namespace sim

namespace {
void *counted_new(std::size_t size) {
    void *p = std::malloc(size == 0 ? 1 : size);
    if (p == nullptr) throw std::bad_alloc();
    if (sim::g_account != nullptr) sim::g_account->add(static_cast<std::int64_t>(malloc_usable_size(p)));
    return p;
}
void counted_delete(void *p) noexcept {
    if (p == nullptr) return;
    if (sim::g_account != nullptr) sim::g_account->add(-static_cast<std::int64_t>(malloc_usable_size(p)));
    std::free(p);
}
}  // namespace

void *operator new(std::size_t size) {
    return counted_new(size);
}
void *operator new[](std::size_t size) {
    return counted_new(size);
}
void *operator new(std::size_t size, const std::nothrow_t &) noexcept {
    try {
        return counted_new(size);
    } catch (...) {
        return nullptr;
    }
}
void *operator new[](std::size_t size, const std::nothrow_t &) noexcept {
    try {
        return counted_new(size);
    } catch (...) {
        return nullptr;
    }
}
void operator delete(void *p) noexcept {
    counted_delete(p);
}
void operator delete[](void *p) noexcept {
    counted_delete(p);
}
void operator delete(void *p, std::size_t) noexcept {
    counted_delete(p);
}
void operator delete[](void *p, std::size_t) noexcept {
    counted_delete(p);
}
