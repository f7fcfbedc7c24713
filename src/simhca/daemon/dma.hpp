// Direct copies between the daemon and client address spaces: the "DMA
// engine" of the software HCA (process_vm_readv/writev, no client help).
#pragma once
#include <cstddef>
#include <cstdint>
#include <sys/types.h>

namespace simhca {

// Both return 0 or an errno (EFAULT when the range is not mapped).
int dma_read(pid_t pid, uint64_t remote_addr, void *dst, size_t len);
int dma_write(pid_t pid, uint64_t remote_addr, const void *src, size_t len);
// As dma_write, but the last 8 bytes become visible only after the rest: one process_vm_writev whose local
// iovec ends in a separate 8-byte segment (the kernel copies segment by segment, and x86 orders a store after
// an earlier string copy's stores, which a single copy does not among its own).
int dma_write_tail_last(pid_t pid, uint64_t remote_addr, const void *src, size_t len);

} // namespace simhca
