#include "dma.hpp"

#include <cerrno>
#include <sys/uio.h>

namespace simhca {

namespace {
template <bool Write>
int transfer(pid_t pid, uint64_t remote_addr, void *local, size_t len) {
    size_t done = 0;
    while (done < len) {
        iovec l{static_cast<char *>(local) + done, len - done};
        iovec r{reinterpret_cast<void *>(remote_addr + done), len - done};
        ssize_t n = Write ? ::process_vm_writev(pid, &l, 1, &r, 1, 0)
                          : ::process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EFAULT; // partial transfers stop at unmapped pages
        done += size_t(n);
    }
    return 0;
}
} // namespace

int dma_read(pid_t pid, uint64_t remote_addr, void *dst, size_t len) {
    return transfer<false>(pid, remote_addr, dst, len);
}

int dma_write(pid_t pid, uint64_t remote_addr, const void *src, size_t len) {
    return transfer<true>(pid, remote_addr, const_cast<void *>(src), len);
}

int dma_write_tail_last(pid_t pid, uint64_t remote_addr, const void *src, size_t len) {
    constexpr size_t kTail = 8;
    if (len <= kTail) return dma_write(pid, remote_addr, src, len);
    auto *bytes = static_cast<char *>(const_cast<void *>(src));
    iovec local[2] = {{bytes, len - kTail}, {bytes + len - kTail, kTail}};
    iovec remote{reinterpret_cast<void *>(remote_addr), len};
    if (::process_vm_writev(pid, local, 2, &remote, 1, 0) == ssize_t(len)) return 0;
    // Interrupted or partial: the same bytes again in two ordered steps.
    if (int e = dma_write(pid, remote_addr, bytes, len - kTail)) return e;
    return dma_write(pid, remote_addr + len - kTail, bytes + len - kTail, kTail);
}

} // namespace simhca
