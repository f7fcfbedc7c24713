// SPDX-License-Identifier: BSD-3-Clause
// A second copier for large local transfers (one node: sender -> daemon bounce buffer -> receiver).
// process_vm_readv/writev cannot copy between two other processes, so a local SEND or RDMA WRITE costs the
// daemon two copies per byte where a plain process_vm_writev loop costs one; with the engine thread alone
// that caps one-node bandwidth near half of such a loop. This helper thread takes every other chunk of a
// large copy, so the two copies of different chunks run on both cores at once.
// The engine stays single-threaded in everything else: run() returns only when the whole range is copied,
// and the helper only ever calls the chunk function it is handed (no access to the object table).
// The helper sleeps on a futex between copies (an idle daemon uses no CPU), and the engine thread claims
// chunks itself as well, so a helper that is not scheduled only costs the wake-up, never a stall.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>

namespace simhca {

class ParallelCopy {
public:
    // Copies [off, off + len) using `bounce` (at least chunk() bytes); returns 0 or an errno.
    using ChunkFn = int (*)(void *ctx, size_t off, size_t len, uint8_t *bounce);

    explicit ParallelCopy(size_t chunk);
    ~ParallelCopy();  // stops and joins the helper
    ParallelCopy(const ParallelCopy &) = delete;
    ParallelCopy &operator=(const ParallelCopy &) = delete;

    size_t chunk() const { return chunk_; }
    // Runs fn over [0, total) in chunk() pieces on this thread and the helper, in no particular order.
    // Returns the first error (the remaining chunks are still skipped quickly), 0 when all were copied.
    // `bounce` is the calling thread's own chunk buffer.
    int run(size_t total, ChunkFn fn, void *ctx, uint8_t *bounce);

private:
    // Claims and copies chunks of the current job until none is left.
    void work(uint8_t *bounce);
    void helper_main();

    const size_t chunk_;
    // The job. Written by run() while next_ says "no chunk left", published by the store of next_, and
    // read by the helper only after it claimed a chunk (then run() is still waiting for it).
    ChunkFn fn_ = nullptr;
    void *ctx_ = nullptr;
    size_t total_ = 0;
    // generation (16 bits) | chunk count (24) | index of the next unclaimed chunk (24): one CAS claims
    // a chunk, and "nothing left" is decided from this word alone (the generation keeps a claim from
    // succeeding on a later job with the same index).
    std::atomic<uint64_t> next_{0};
    std::atomic<int> err_{0};
    std::atomic<int> helper_inside_{0};  // the helper is between its claim attempt and the chunk's end
    std::atomic<uint32_t> wake_{0};      // futex word: the newest job's generation, or kStop
    std::atomic<bool> helper_sleeping_{false};
    uint32_t gen_ = 0;
    std::unique_ptr<uint8_t[]> helper_bounce_;
    std::thread helper_;
};

}  // namespace simhca
