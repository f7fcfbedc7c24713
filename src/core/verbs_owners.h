// SPDX-License-Identifier: BSD-3-Clause
// RAII owners for verbs objects: one owner per resource, released exactly once, in reverse order of creation
// when they are members of one class. Works with the real libibverbs and the software HCA alike.
#pragma once

#include <infiniband/verbs.h>

#include <memory>

namespace xrc {

template <auto Release>
struct VerbsRelease {
    template <class T>
    void operator()(T *object) const noexcept {
        if (object != nullptr) (void)Release(object);
    }
};

using ContextPtr = std::unique_ptr<ibv_context, VerbsRelease<ibv_close_device>>;
using PdPtr = std::unique_ptr<ibv_pd, VerbsRelease<ibv_dealloc_pd>>;
using MrPtr = std::unique_ptr<ibv_mr, VerbsRelease<ibv_dereg_mr>>;
using CqPtr = std::unique_ptr<ibv_cq, VerbsRelease<ibv_destroy_cq>>;
using SrqPtr = std::unique_ptr<ibv_srq, VerbsRelease<ibv_destroy_srq>>;
using QpPtr = std::unique_ptr<ibv_qp, VerbsRelease<ibv_destroy_qp>>;
using AhPtr = std::unique_ptr<ibv_ah, VerbsRelease<ibv_destroy_ah>>;
// ibv_close_xrcd is a static inline function of verbs.h: a template argument cannot name it (internal linkage).
struct XrcdRelease {
    void operator()(ibv_xrcd *xrcd) const noexcept {
        if (xrcd != nullptr) (void)ibv_close_xrcd(xrcd);
    }
};
using XrcdPtr = std::unique_ptr<ibv_xrcd, XrcdRelease>;
using CompChannelPtr = std::unique_ptr<ibv_comp_channel, VerbsRelease<ibv_destroy_comp_channel>>;

// The device list returned by ibv_get_device_list, with its length.
class DeviceList {
public:
    DeviceList() noexcept : list_(ibv_get_device_list(&count_)) {
        if (list_ == nullptr) count_ = 0;
    }
    DeviceList(const DeviceList &) = delete;
    DeviceList &operator=(const DeviceList &) = delete;
    ~DeviceList() {
        if (list_ != nullptr) ibv_free_device_list(list_);
    }
    int size() const noexcept { return count_; }
    ibv_device *operator[](int i) const noexcept { return list_[i]; }

private:
    int count_ = 0;
    ibv_device **list_ = nullptr;
};

}  // namespace xrc
