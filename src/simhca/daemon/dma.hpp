// SPDX-License-Identifier: BSD-3-Clause
// The "DMA engine" of the software HCA: copies between the daemon and the clients' address spaces
// (process_vm_readv/writev, no client help), checked against the MRs of the object table. The requester
// gathers through it, the responder and the completer scatter through it (rxe's copy_data in rxe_mr.c).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <sys/types.h>
#include <vector>

#include <infiniband/verbs.h>

#include "../common/shm_layout.hpp"
#include "object_table.hpp"
#include "packet.hpp"
#include "parallel_copy.hpp"

namespace simhca {

// Both return 0 or an errno (EFAULT when the range is not mapped).
int dma_read(pid_t pid, uint64_t remote_addr, void *dst, size_t len);
int dma_write(pid_t pid, uint64_t remote_addr, const void *src, size_t len);
// As dma_write, but the last 8 bytes become visible only after the rest: one process_vm_writev whose local
// iovec ends in a separate 8-byte segment (the kernel copies segment by segment, and x86 orders a store after
// an earlier string copy's stores, which a single copy does not among its own).
int dma_write_tail_last(pid_t pid, uint64_t remote_addr, const void *src, size_t len);

class Dma {
public:
    explicit Dma(ObjectTable &objs) : objs_(objs) {}

    // An MR's memory: the registering process's (process_vm_*) or device memory (memcpy). 0 or an errno.
    // tail_last: the last 8 bytes become visible after the rest (RDMA WRITE placement, see responder.cpp).
    static int mr_read(const Mr &mr, uint64_t host, void *dst, size_t n);
    static int mr_write(const Mr &mr, uint64_t host, const void *src, size_t n, bool tail_last = false);
    // Bytes [off, off + n) of a message's payload: its buffer, or the sender's memory when it is streamed.
    static int copy_src(const Message &m, size_t off, uint8_t *dst, size_t n);
    // Bytes [off, off + n) of the payload into an MR (large streamed copies on two threads, parallel_copy.hpp).
    int copy_to(const Mr &mr, uint64_t host, const Message &m, size_t off, size_t n, bool tail_last = false);
    // The payload (after `skip` bytes of the SGE space) into a receive's / READ's SGEs, checked against
    // the MRs of `owner` in `pd` (LOC_PROT_ERR, LOC_LEN_ERR when the SGEs are too short).
    ibv_wc_status scatter_msg(Client &owner, uint32_t pd, const shm::Sge *sge, uint32_t nsge, const Message &m,
                              size_t len, size_t skip);
    ibv_wc_status scatter(Client &owner, uint32_t pd, const shm::Sge *sge, uint32_t nsge, const uint8_t *data,
                          size_t len, size_t skip = 0);

private:
    // A large local copy split between this thread and the copier's (copy_to).
    struct StreamJob {
        const Mr *mr;
        uint64_t host;
        const Message *m;
        size_t off;
    };
    static int stream_chunk(void *ctx, size_t at, size_t len, uint8_t *bounce);
    ParallelCopy *copier(size_t chunk);

    ObjectTable &objs_;
    std::vector<uint8_t> bounce_;           // chunk buffer for local streaming copies
    std::unique_ptr<ParallelCopy> copier_;  // second copier for large local copies (parallel_copy.hpp)
    bool copier_tried_ = false;
};

}  // namespace simhca
