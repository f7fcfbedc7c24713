// SPDX-License-Identifier: BSD-3-Clause
// The receive side of one size class: one XRC SRQ owned by this process, and its buffers, carved from one
// registered slab. Buffers are posted at start-up and reposted one by one right after their message was
// handed up, so the SRQ stays full; the SRQ limit (low watermark) event tells when the process falls behind.
#pragma once

#include "result.h"
#include "verbs_owners.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xrc {

class RecvPool;

// One posted receive buffer. Its address, tagged with bit 0, is the work request id (CompletionKind::receive,
// completion_kind.h).
struct alignas(8) RecvBuffer {
    RecvPool *pool;
    std::uint8_t *data;
};

inline constexpr std::uint64_t kRecvWrIdTag = 1;
inline RecvBuffer *recv_buffer_of(std::uint64_t wr_id) noexcept {
    return reinterpret_cast<RecvBuffer *>(wr_id & ~kRecvWrIdTag);
}

class RecvPool {
public:
    // An SRQ in `xrcd` whose completions go to `cq`, with `count` buffers of `buffer_size` bytes, all posted.
    static Result<std::unique_ptr<RecvPool>> make(ibv_context *context, ibv_pd *pd, ibv_cq *cq, ibv_xrcd *xrcd,
                                                  std::uint32_t buffer_size, std::uint32_t count,
                                                  std::uint32_t low_watermark);
    RecvPool(const RecvPool &) = delete;
    RecvPool &operator=(const RecvPool &) = delete;
    ~RecvPool();

    std::uint32_t srq_num() const noexcept { return srq_num_; }
    std::uint32_t buffer_size() const noexcept { return buffer_size_; }
    ibv_srq *srq() const noexcept { return srq_.get(); }
    std::size_t registered_bytes() const noexcept { return slab_bytes_; }
    std::uint32_t count() const noexcept { return count_; }
    std::uint32_t low_watermark() const noexcept { return low_watermark_; }
    // Buffers posted and not seen consumed: the completions not polled yet are still counted as posted.
    std::uint32_t posted() const noexcept { return count_ - not_posted_; }

    // Posts one buffer back to the SRQ (after its message was consumed). 0 or an errno.
    int repost(RecvBuffer *buffer) noexcept;
    // A buffer that is not posted again (flushed, or its repost failed): posted() counts one less.
    void count_lost() noexcept { ++not_posted_; }
    // Arms the SRQ limit event again (it disarms itself when it fires).
    int arm_limit() noexcept;

private:
    RecvPool(std::uint32_t buffer_size, std::uint32_t count, std::uint32_t low_watermark) noexcept
        : buffer_size_(buffer_size), count_(count), low_watermark_(low_watermark) {}
    Result<void> fill(ibv_context *context, ibv_pd *pd, ibv_cq *cq, ibv_xrcd *xrcd);

    std::uint32_t buffer_size_;
    std::uint32_t count_;
    std::uint32_t low_watermark_;
    std::uint32_t srq_num_ = 0;
    std::uint32_t not_posted_ = 0;
    std::size_t slab_bytes_ = 0;
    std::uint8_t *slab_ = nullptr;
    MrPtr mr_;
    std::vector<RecvBuffer> buffers_;
    SrqPtr srq_;
};

}  // namespace xrc
