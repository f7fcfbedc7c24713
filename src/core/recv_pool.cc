// SPDX-License-Identifier: BSD-3-Clause
#include "recv_pool.h"

#include <sys/mman.h>

namespace xrc {

Result<std::unique_ptr<RecvPool>> RecvPool::make(ibv_context *context, ibv_pd *pd, ibv_cq *cq, ibv_xrcd *xrcd,
                                                 std::uint32_t buffer_size, std::uint32_t count,
                                                 std::uint32_t low_watermark) {
    std::unique_ptr<RecvPool> pool(new RecvPool(buffer_size, count, low_watermark));
    if (auto filled = pool->fill(context, pd, cq, xrcd); !filled) return std::move(filled).error();
    return pool;
}

// The slab, its registration, the SRQ, every buffer posted; the destructor undoes whatever of it was done.
Result<void> RecvPool::fill(ibv_context *context, ibv_pd *pd, ibv_cq *cq, ibv_xrcd *xrcd) {
    const std::uint32_t count = count_;
    slab_bytes_ = static_cast<std::size_t>(buffer_size_) * count;
    void *slab = mmap(nullptr, slab_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (slab == MAP_FAILED) {
        const std::size_t wanted = slab_bytes_;
        slab_bytes_ = 0;
        return Error(ErrorKind::resource, "cannot allocate " + std::to_string(wanted) + " bytes of receive buffers");
    }
    slab_ = static_cast<std::uint8_t *>(slab);
    mr_.reset(ibv_reg_mr(pd, slab_, slab_bytes_, IBV_ACCESS_LOCAL_WRITE));
    if (!mr_) {
        return Error::from_errno("cannot register the receive buffers (" + std::to_string(slab_bytes_) + " bytes)");
    }
    ibv_srq_init_attr_ex attr{};
    attr.srq_context = this;  // lets the SRQ limit event find its pool
    attr.attr.max_wr = count;
    attr.attr.max_sge = 1;
    attr.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
    attr.srq_type = IBV_SRQT_XRC;
    attr.xrcd = xrcd;
    attr.cq = cq;
    attr.pd = pd;
    srq_.reset(ibv_create_srq_ex(context, &attr));
    if (!srq_) {
        return Error::from_errno("cannot create an XRC SRQ of " + std::to_string(count) + " entries");
    }
    if (ibv_get_srq_num(srq_.get(), &srq_num_) != 0) {
        return Error(ErrorKind::system, "ibv_get_srq_num failed");
    }
    buffers_.resize(count);
    for (std::uint32_t i = 0; i < count; ++i) {
        buffers_[i] = RecvBuffer{this, slab_ + static_cast<std::size_t>(i) * buffer_size_};
        if (const int rc = repost(&buffers_[i]); rc != 0) return Error::system("cannot post receive buffers", rc);
    }
    if (low_watermark_ > 0) (void)arm_limit();
    return {};
}

RecvPool::~RecvPool() {
    srq_.reset();  // before the buffers' registration and memory go
    mr_.reset();
    if (slab_ != nullptr) munmap(slab_, slab_bytes_);
}

int RecvPool::repost(RecvBuffer *buffer) noexcept {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buffer->data), buffer_size_, mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = reinterpret_cast<std::uintptr_t>(buffer) | kRecvWrIdTag;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr *bad = nullptr;
    return ibv_post_srq_recv(srq_.get(), &wr, &bad);
}

int RecvPool::arm_limit() noexcept {
    ibv_srq_attr attr{};
    attr.srq_limit = low_watermark_;
    return ibv_modify_srq(srq_.get(), &attr, IBV_SRQ_LIMIT);
}

}  // namespace xrc
