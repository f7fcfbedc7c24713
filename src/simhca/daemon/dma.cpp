// SPDX-License-Identifier: BSD-3-Clause
#include "dma.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sys/uio.h>

namespace simhca {

using namespace shm;

namespace {
template <bool Write>
int transfer(pid_t pid, uint64_t remote_addr, void *local, size_t len) {
    size_t done = 0;
    while (done < len) {
        iovec l{static_cast<char *>(local) + done, len - done};
        iovec r{reinterpret_cast<void *>(remote_addr + done), len - done};
        ssize_t n = Write ? ::process_vm_writev(pid, &l, 1, &r, 1, 0) : ::process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EFAULT;  // partial transfers stop at unmapped pages
        done += size_t(n);
    }
    return 0;
}
}  // namespace

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

ibv_wc_status Dma::scatter(Client &owner, uint32_t pd, const Sge *sge, uint32_t nsge, const uint8_t *data, size_t len,
                           size_t skip) {
    Message m{};
    m.data = data;
    m.size = len;
    return scatter_msg(owner, pd, sge, nsge, m, len, skip);
}

int Dma::copy_src(const Message &m, size_t off, uint8_t *dst, size_t n) {
    if (m.data) {
        std::memcpy(dst, m.data + off, n);
        return 0;
    }
    // Find the sender ranges covering [off, off + n) and read them at once.
    iovec remote[kMaxSge];
    int cnt = 0;
    size_t pos = 0;
    for (const iovec &v : *m.src_iov) {
        size_t end = pos + v.iov_len;
        if (end > off && pos < off + n && cnt < int(kMaxSge)) {
            size_t from = std::max(pos, off), to = std::min(end, off + n);
            remote[cnt++] = {static_cast<char *>(v.iov_base) + (from - pos), to - from};
        }
        pos = end;
    }
    iovec local{dst, n};
    ssize_t got = ::process_vm_readv(m.src_pid, &local, 1, remote, cnt, 0);
    return got == ssize_t(n) ? 0 : EFAULT;
}

int Dma::mr_read(const Mr &mr, uint64_t host, void *dst, size_t n) {
    if (mr.local) {
        std::memcpy(dst, reinterpret_cast<const void *>(host), n);
        return 0;
    }
    return dma_read(mr.pid, host, dst, n);
}

int Dma::mr_write(const Mr &mr, uint64_t host, const void *src, size_t n, bool tail_last) {
    if (mr.local) {
        std::memcpy(reinterpret_cast<void *>(host), src, n);
        return 0;
    }
    return tail_last ? dma_write_tail_last(mr.pid, host, src, n) : dma_write(mr.pid, host, src, n);
}

// One chunk of a local streaming copy, for ParallelCopy (either thread): copy_src and mr_write only read
// the message and the MR, never the object table, so the helper thread may call them.
int Dma::stream_chunk(void *ctx, size_t at, size_t len, uint8_t *bounce) {
    auto *s = static_cast<StreamJob *>(ctx);
    if (int e = copy_src(*s->m, s->off + at, bounce, len)) return e;
    return mr_write(*s->mr, s->host + at, bounce, len, false);
}

// The second copier thread, made on the first large local copy (SIMHCA_COPY_THREAD=0: never, for
// comparisons; also none when the thread cannot be created).
ParallelCopy *Dma::copier(size_t chunk) {
    if (!copier_tried_) {
        copier_tried_ = true;
        const char *env = std::getenv("SIMHCA_COPY_THREAD");
        if (!(env && std::strcmp(env, "0") == 0)) {
            try {
                copier_ = std::make_unique<ParallelCopy>(chunk);
            } catch (const std::exception &) {
            }
        }
    }
    return copier_.get();
}

int Dma::copy_to(const Mr &mr, uint64_t host, const Message &m, size_t off, size_t n, bool tail_last) {
    if (m.data) return mr_write(mr, host, m.data + off, n, tail_last);
    // Stays in cache between the two copies (a core's L2 holds it); with the copier thread the best of the sizes
    // tried (docs/benchmarks.md, "Figures behind constants in the code").
    constexpr size_t kChunk = 128 * 1024;
    // From two chunks on, the helper's wake-up is worth it: its half of the copies runs on the other core.
    constexpr size_t kParallelMin = 2 * kChunk;
    if (bounce_.size() < kChunk) bounce_.resize(kChunk);
    if (n >= kParallelMin) {
        if (ParallelCopy *pc = copier(kChunk)) {
            // A write's last 8 bytes go after everything else (tail_last): the helper's chunks are complete
            // when run() returns, so the serial copy below of the tail is the last store.
            size_t body = tail_last ? n - 8 : n;
            StreamJob job{&mr, host, &m, off};
            if (int e = pc->run(body, &Dma::stream_chunk, &job, bounce_.data())) return e;
            if (body == n) return 0;
            if (int e = copy_src(m, off + body, bounce_.data(), 8)) return e;
            return mr_write(mr, host + body, bounce_.data(), 8, false);
        }
    }
    for (size_t done = 0; done < n;) {
        size_t c = std::min(kChunk, n - done);
        if (int e = copy_src(m, off + done, bounce_.data(), c)) return e;
        if (int e = mr_write(mr, host + done, bounce_.data(), c, tail_last && done + c == n)) return e;
        done += c;
    }
    return 0;
}

ibv_wc_status Dma::scatter_msg(Client &owner, uint32_t pd, const Sge *sge, uint32_t nsge, const Message &m, size_t len,
                               size_t skip) {
    size_t pos = 0;  // position in the sge space
    for (uint32_t i = 0; i < nsge && pos < skip + len; ++i) {
        const Sge &g = sge[i];
        size_t seg_end = pos + g.length;
        if (seg_end <= skip) {
            pos = seg_end;
            continue;
        }
        Mr *mr = objs_.mr_by_key(g.lkey);
        if (!mr || mr->pd != pd || mr->owner != &owner || !(mr->access & IBV_ACCESS_LOCAL_WRITE) || g.addr < mr->iova ||
            g.addr + g.length > mr->iova + mr->length)
            return IBV_WC_LOC_PROT_ERR;
        size_t from = std::max(pos, skip), to = std::min(seg_end, skip + len);
        uint64_t host = mr->addr + (g.addr - mr->iova) + (from - pos);
        if (to > from && copy_to(*mr, host, m, from - skip, to - from)) return IBV_WC_LOC_PROT_ERR;
        pos = seg_end;
    }
    return pos >= skip + len ? IBV_WC_SUCCESS : IBV_WC_LOC_LEN_ERR;
}

}  // namespace simhca
