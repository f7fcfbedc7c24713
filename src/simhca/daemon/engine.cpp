// The data path: consumes send WQEs from the shared rings, executes them
// against the responder (local QPs for now), and writes CQEs. Reliability
// follows IB RC: RNR NAKs back off by the responder's min_rnr_timer and are
// retried rnr_retry times (7 = forever); unanswered requests are retried
// after the local ACK timeout retry_cnt times; errors move the QP to ERR and
// flush everything outstanding.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../common/limits.hpp"
#include "device.hpp"
#include "dma.hpp"
#include "network.hpp"

namespace simhca {

using namespace shm;

namespace {

// IB spec table of RNR NAK timer values (in units of 10 ns: 0 = 655.36 ms).
uint64_t rnr_delay_ns(uint8_t code) {
    static const uint32_t us100[32] = {
        65536, 1,    2,    3,    4,    6,    8,    12,   16,   24,   32,   48,   64,    96,    128,   192,
        256,   384,  512,  768,  1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
    return uint64_t(us100[code & 31]) * 10000ull; // entries are in units of 10 us
}

// Local ACK timeout: 4.096 us * 2^timeout (0 means "infinite": we poll once a second).
uint64_t ack_timeout_ns(uint8_t t) {
    if (t == 0) return 1000000000ull;
    if (t > 31) t = 31;
    return 4096ull << t;
}

ibv_wc_opcode wc_opcode_for(uint32_t wr_opcode) {
    switch (wr_opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
    case IBV_WR_ATOMIC_WRITE: return IBV_WC_ATOMIC_WRITE;
    case IBV_WR_BIND_MW: return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV: return IBV_WC_LOCAL_INV;
    default: return IBV_WC_SEND;
    }
}

bool carries_payload(uint32_t op) {
    return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE ||
           op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_ATOMIC_WRITE || op == IBV_WR_SEND_WITH_INV;
}

// Work requests the local HCA executes itself, in send-queue order.
bool is_local_op(uint32_t op) { return op == IBV_WR_BIND_MW || op == IBV_WR_LOCAL_INV; }

} // namespace

void Device::on_doorbell(Client &c) {
    // (The doorbell eventfd is edge-triggered in epoll: its counter is never read back.)
    // A copy: the loop must not see the list change under it (kept to avoid an allocation per doorbell).
    std::vector<uint32_t> &mine = doorbell_qpns_;
    mine.assign(c.qpns.begin(), c.qpns.end());
    for (uint32_t qpn : mine) {
        Qp *qp = qp_by_num(qpn);
        if (!qp) continue;
        if (qp->state == IBV_QPS_ERR) flush_qp(*qp);
        else pull_sq(*qp);
    }
}

int Device::setup_awake_page() {
    UniqueFd fd(::memfd_create("simhca-awake", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd || ::ftruncate(fd.get(), 4096) < 0) return errno;
    void *p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) return errno;
    // Only we write it: a client that could would make every other client skip its doorbells.
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        int e = errno;
        ::munmap(p, 4096);
        return e;
    }
    awake_ = new (p) std::atomic<uint32_t>(1);
    awake_fd_ = std::move(fd);
    return 0;
}

bool Device::going_to_sleep() {
    if (!awake_) return false;
    awake_->store(0, std::memory_order_relaxed);
    // Store awake = 0, then load the producer indices; a client stores its index, then loads awake
    // (lib ring_doorbell_sq). With full fences on both sides one of us sees the other's store.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    std::vector<uint32_t> &work = doorbell_qpns_;
    work.clear();
    for (auto &[qpn, qp] : qps_) {
        if (!qp->ctl || !qp->sq_entries || qp->type == IBV_QPT_XRC_RECV) continue;
        uint32_t head = qp->ctl->sq.head.load(std::memory_order_acquire);
        if (head != qp->sq_seen) {
            qp->sq_seen = head;
            work.push_back(qpn);
        }
    }
    if (work.empty()) return false;
    awake_->store(1, std::memory_order_relaxed);
    for (uint32_t qpn : work) {
        Qp *qp = qp_by_num(qpn);
        if (!qp) continue;
        if (qp->state == IBV_QPS_ERR) flush_qp(*qp);
        else pull_sq(*qp);
    }
    return true;
}

void Device::pull_sq(Qp &qp) {
    if (!qp.ctl || qp.type == IBV_QPT_XRC_RECV) return;
    if (qp.state != IBV_QPS_RTS && qp.state != IBV_QPS_ERR) return; // WQEs wait in the ring
    RingCtl &r = qp.ctl->sq;
    uint32_t head = r.head.load(std::memory_order_acquire);
    uint32_t tail = r.tail.load(std::memory_order_relaxed);
    qp.sq_seen = head;
    if (head - tail > qp.sq_entries) {
        // The client corrupted its producer index: treat as a fatal QP error.
        r.tail.store(head, std::memory_order_release);
        qp_event(qp, IBV_EVENT_QP_FATAL);
        qp_to_error(qp);
        return;
    }
    while (tail != head && qp.pending.size() < qp.sq_entries) {
        qp.pending.push_back(qp.sq[tail & (qp.sq_entries - 1)]);
        ++tail;
    }
    r.tail.store(tail, std::memory_order_release);
    progress(qp);
}

void Device::complete_send(Qp &qp, const SendWqe &w, ibv_wc_status st) {
    if ((w.send_flags & kTmInternalWqe) && tm_internal_done(qp, w, st)) return; // a TM SRQ's rendezvous
    bool signaled = qp.sq_sig_all || (w.send_flags & IBV_SEND_SIGNALED);
    if (st == IBV_WC_SUCCESS && !signaled) return;
    Cqe e{};
    e.wr_id = w.wr_id;
    e.status = st;
    e.opcode = wc_opcode_for(w.opcode);
    e.qp_num = qp.qpn;
    if (w.opcode == IBV_WR_RDMA_READ) {
        for (uint32_t i = 0; i < std::min(w.num_sge, kMaxSge); ++i) e.byte_len += w.sge[i].length;
    } else if (w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        e.byte_len = 8;
    }
    post_cqe(qp.send_cq, e, false);
}

bool Device::post_cqe(uint32_t cq_id, const Cqe &e, bool solicited) {
    auto it = cqs_.find(cq_id);
    if (it == cqs_.end()) return false;
    Cq &cq = *it->second;
    uint32_t tail = cq.ctl->ring.tail.load(std::memory_order_acquire);
    if (cq.head - tail >= cq.entries) {
        if (!cq.overflowed) {
            cq.overflowed = true;
            if (post_async(cq.owner, IBV_EVENT_CQ_ERR, cq.cookie)) cq.async_events++;
        }
        return false;
    }
    cq.ring[cq.head & (cq.entries - 1)] = e;
    cq.head++;
    cq.ctl->ring.head.store(cq.head, std::memory_order_release);
    // Store head, then load armed; the library stores armed, then loads head.
    // Without a full fence both could read the old value and the wakeup would
    // be lost (the classic store/load race).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    uint32_t armed = cq.ctl->armed.load(std::memory_order_acquire);
    if (armed == 1 || (armed == 2 && (solicited || e.status != IBV_WC_SUCCESS))) {
        if (cq.ctl->armed.exchange(0, std::memory_order_acq_rel) != 0 && cq.channel) {
            auto ch = channels_.find(cq.channel);
            if (ch != channels_.end()) {
                proto::CompRecord rec{cq.cookie};
                if (::write(ch->second->wr.get(), &rec, sizeof(rec)) == sizeof(rec)) cq.comp_events++;
            }
        }
    }
    return true;
}

void Device::qp_to_error(Qp &qp) {
    qp.state = IBV_QPS_ERR;
    qp.attr.qp_state = IBV_QPS_ERR;
    qp.retry_at_ns = 0;
    forget_inflight(qp); // late replies find no taker
    if (qp.ctl) qp.ctl->in_error.store(1, std::memory_order_release);
    flush_qp(qp);
    if ((qp.srq || qp.type == IBV_QPT_XRC_RECV) && !qp.last_wqe_sent) {
        qp.last_wqe_sent = true;
        qp_event(qp, IBV_EVENT_QP_LAST_WQE_REACHED);
    }
}

// Everything outstanding completes with IBV_WC_WR_FLUSH_ERR (signaled or not).
void Device::flush_qp(Qp &qp) {
    if (!qp.ctl) return;
    RingCtl &s = qp.ctl->sq;
    uint32_t head = s.head.load(std::memory_order_acquire), tail = s.tail.load(std::memory_order_relaxed);
    if (head - tail <= qp.sq_entries)
        for (; tail != head; ++tail) qp.pending.push_back(qp.sq[tail & (qp.sq_entries - 1)]);
    s.tail.store(head, std::memory_order_release);
    while (!qp.pending.empty()) {
        complete_send(qp, qp.pending.front(), IBV_WC_WR_FLUSH_ERR);
        qp.pending.pop_front();
    }
    if (qp.rq_entries) {
        RingCtl &r = qp.ctl->rq;
        head = r.head.load(std::memory_order_acquire);
        tail = r.tail.load(std::memory_order_relaxed);
        if (head - tail <= qp.rq_entries) {
            for (; tail != head; ++tail) {
                Cqe e{};
                e.wr_id = qp.rq[tail & (qp.rq_entries - 1)].wr_id;
                e.status = IBV_WC_WR_FLUSH_ERR;
                e.opcode = IBV_WC_RECV;
                e.qp_num = qp.qpn;
                post_cqe(qp.recv_cq, e, false);
            }
        }
        r.tail.store(head, std::memory_order_release);
    }
}

ibv_wc_status Device::scatter(Client &owner, uint32_t pd, const Sge *sge, uint32_t nsge, const uint8_t *data,
                              size_t len, size_t skip) {
    Message m{};
    m.data = data;
    m.size = len;
    return scatter_msg(owner, pd, sge, nsge, m, len, skip);
}

// Validates the WQE's local buffers. With `lazy` (the responder is on this
// node) only the sender's address ranges are recorded in src_iov_, and the
// responder streams the bytes straight to their destination in small chunks
// (sender -> bounce buffer in cache -> receiver); otherwise the payload is
// copied into `out` now (it has to travel over the network anyway).
int Device::gather(Qp &qp, const SendWqe &w, std::vector<uint8_t> &out, ibv_wc_status &st, bool lazy) {
    out.clear();
    src_iov_.clear();
    st = IBV_WC_SUCCESS;
    if (w.send_flags & IBV_SEND_INLINE) {
        if (w.inline_len > kMaxInline) return st = IBV_WC_LOC_LEN_ERR, -1;
        out.assign(w.inline_data, w.inline_data + w.inline_len);
        return 0;
    }
    if (w.num_sge > kMaxSge) return st = IBV_WC_LOC_LEN_ERR, -1;
    size_t total = 0;
    for (uint32_t i = 0; i < w.num_sge; ++i) total += w.sge[i].length;
    if (total > limits::kMaxMsgSize) return st = IBV_WC_LOC_LEN_ERR, -1;
    // Device memory is ours, and memory of another process (an importer's MR) is not where the
    // responder's stream reads (qp.owner->pid): copy those now.
    for (uint32_t i = 0; i < w.num_sge && lazy; ++i)
        if (Mr *mr = mr_by_key(w.sge[i].lkey); mr && (mr->local || mr->pid != qp.owner->pid)) lazy = false;
    if (!lazy) out.resize(total);
    size_t off = 0;
    for (uint32_t i = 0; i < w.num_sge; ++i) {
        const Sge &g = w.sge[i];
        if (g.length == 0) continue;
        Mr *mr = mr_by_key(g.lkey);
        if (!mr || mr->pd != qp.pd || mr->owner != qp.owner || g.addr < mr->iova ||
            g.addr + g.length > mr->iova + mr->length)
            return st = IBV_WC_LOC_PROT_ERR, -1;
        uint64_t host = mr->addr + (g.addr - mr->iova);
        if (lazy) src_iov_.push_back({reinterpret_cast<void *>(host), g.length});
        else if (mr_read(*mr, host, out.data() + off, g.length)) return st = IBV_WC_LOC_PROT_ERR, -1;
        off += g.length;
    }
    return 0;
}

int Device::copy_src(const Message &m, size_t off, uint8_t *dst, size_t n) {
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

int Device::mr_read(const Mr &mr, uint64_t host, void *dst, size_t n) {
    if (mr.local) {
        std::memcpy(dst, reinterpret_cast<const void *>(host), n);
        return 0;
    }
    return dma_read(mr.pid, host, dst, n);
}

int Device::mr_write(const Mr &mr, uint64_t host, const void *src, size_t n, bool tail_last) {
    if (mr.local) {
        std::memcpy(reinterpret_cast<void *>(host), src, n);
        return 0;
    }
    return tail_last ? dma_write_tail_last(mr.pid, host, src, n) : dma_write(mr.pid, host, src, n);
}

// One chunk of a local streaming copy, for ParallelCopy (either thread): copy_src and mr_write only read
// the message and the MR, never the Device's tables, so the helper thread may call them.
int Device::stream_chunk(void *ctx, size_t at, size_t len, uint8_t *bounce) {
    auto *s = static_cast<StreamJob *>(ctx);
    if (int e = s->dev->copy_src(*s->m, s->off + at, bounce, len)) return e;
    return s->dev->mr_write(*s->mr, s->host + at, bounce, len, false);
}

// The second copier thread, made on the first large local copy (SIMHCA_COPY_THREAD=0: never, for
// comparisons; also none when the thread cannot be created).
ParallelCopy *Device::copier(size_t chunk) {
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

int Device::copy_to(const Mr &mr, uint64_t host, const Message &m, size_t off, size_t n, bool tail_last) {
    if (m.data) return mr_write(mr, host, m.data + off, n, tail_last);
    // Stays in cache between the two copies (L2 is 2 MiB a core here); with the copier thread 128 KiB
    // measured best (1 MiB ib_send_bw one node, GB/s: 32 KiB 5.8-6.7, 64 KiB 7.3-8.1, 128 KiB 7.7-8.4,
    // 256 KiB 7.0-8.7).
    constexpr size_t kChunk = 128 * 1024;
    // From two chunks on, the helper's wake-up (a few us) is worth it: its half of the copies runs on the
    // other core (one node: 1 MiB SENDs / WRITEs, measured in tests/simhca/simhca-bench.sh).
    constexpr size_t kParallelMin = 2 * kChunk;
    if (bounce_.size() < kChunk) bounce_.resize(kChunk);
    if (n >= kParallelMin) {
        if (ParallelCopy *pc = copier(kChunk)) {
            // A write's last 8 bytes go after everything else (tail_last): the helper's chunks are complete
            // when run() returns, so the serial copy below of the tail is the last store.
            size_t body = tail_last ? n - 8 : n;
            StreamJob job{this, &mr, host, &m, off};
            if (int e = pc->run(body, &Device::stream_chunk, &job, bounce_.data())) return e;
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

ibv_wc_status Device::scatter_msg(Client &owner, uint32_t pd, const Sge *sge, uint32_t nsge, const Message &m,
                                  size_t len, size_t skip) {
    size_t pos = 0; // position in the sge space
    for (uint32_t i = 0; i < nsge && pos < skip + len; ++i) {
        const Sge &g = sge[i];
        size_t seg_end = pos + g.length;
        if (seg_end <= skip) {
            pos = seg_end;
            continue;
        }
        Mr *mr = mr_by_key(g.lkey);
        if (!mr || mr->pd != pd || mr->owner != &owner || !(mr->access & IBV_ACCESS_LOCAL_WRITE) ||
            g.addr < mr->iova || g.addr + g.length > mr->iova + mr->length)
            return IBV_WC_LOC_PROT_ERR;
        size_t from = std::max(pos, skip), to = std::min(seg_end, skip + len);
        uint64_t host = mr->addr + (g.addr - mr->iova) + (from - pos);
        if (to > from && copy_to(*mr, host, m, from - skip, to - from)) return IBV_WC_LOC_PROT_ERR;
        pos = seg_end;
    }
    return pos >= skip + len ? IBV_WC_SUCCESS : IBV_WC_LOC_LEN_ERR;
}

// Builds the request for a WQE (gathering the payload into buf_). Returns
// a local error status when the WQE itself is bad.
ibv_wc_status Device::build_message(Qp &qp, const SendWqe &w, Message &m, uint16_t &dlid) {
    // A previous local (lazy) gather leaves its iovecs here; an RDMA READ or atomic to a remote node gathers
    // nothing, and must not ship that stale list (it crashed the daemon: null data with a stale size).
    src_iov_.clear();
    bool ud = qp.type == IBV_QPT_UD;
    bool uc = qp.type == IBV_QPT_UC;
    bool op_ok = ud   ? (w.opcode == IBV_WR_SEND || w.opcode == IBV_WR_SEND_WITH_IMM)
                 : uc ? carries_payload(w.opcode) && w.opcode != IBV_WR_ATOMIC_WRITE
                      : w.opcode <= IBV_WR_ATOMIC_FETCH_AND_ADD || w.opcode == IBV_WR_ATOMIC_WRITE ||
                            w.opcode == IBV_WR_SEND_WITH_INV;
    if (!op_ok) return IBV_WC_LOC_QP_OP_ERR;
    m = Message{};
    m.opcode = w.opcode;
    m.src_qpn = qp.qpn;
    m.src_lid = cfg.lid;
    m.srqn = w.remote_srqn & 0xffffff;
    m.remote_addr = w.remote_addr;
    m.rkey = w.rkey;
    m.imm = w.imm_data;
    m.has_imm = w.opcode == IBV_WR_SEND_WITH_IMM || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    m.has_inv = w.opcode == IBV_WR_SEND_WITH_INV;
    m.solicited = w.send_flags & IBV_SEND_SOLICITED;
    m.compare_add = w.compare_add;
    m.swap = w.swap;
    if (ud) {
        m.dst_qpn = w.remote_qpn & 0xffffff;
        // A qkey with the high bit set means "use the QP's own qkey".
        m.qkey = (w.remote_qkey & 0x80000000u) ? qp.attr.qkey : w.remote_qkey;
        dlid = w.av.dlid;
        m.dlid = dlid;
        if (w.av.is_global) {
            m.has_grh = true;
            uint8_t *g = m.grh;
            uint32_t vtf = (6u << 28) | (uint32_t(w.av.traffic_class) << 20) | (w.av.flow_label & 0xfffff);
            g[0] = uint8_t(vtf >> 24);
            g[1] = uint8_t(vtf >> 16);
            g[2] = uint8_t(vtf >> 8);
            g[3] = uint8_t(vtf);
            g[6] = 0x1b; // next header: IBA transport
            g[7] = w.av.hop_limit;
            uint64_t pfx = __builtin_bswap64(limits::kSubnetPrefix);
            uint64_t guid = __builtin_bswap64(limits::node_guid_for_lid(cfg.lid));
            std::memcpy(g + 8, &pfx, 8);
            std::memcpy(g + 16, &guid, 8);
            std::memcpy(g + 24, w.av.dgid, 16);
        }
    } else {
        m.dst_qpn = qp.attr.dest_qp_num;
        dlid = qp.attr.ah_attr.dlid;
    }
    ibv_wc_status st = IBV_WC_SUCCESS;
    if (carries_payload(w.opcode)) {
        bool lazy = !ud && dlid == cfg.lid && !(w.send_flags & IBV_SEND_INLINE);
        gather(qp, w, buf_, st, lazy);
        if (st != IBV_WC_SUCCESS) return st;
        if (ud && buf_.size() > limits::kMaxUdPayload) return IBV_WC_LOC_LEN_ERR;
        if (ud) {
            uint16_t paylen = uint16_t(buf_.size() + 8 + 4 + 4); // BTH + DETH + ICRC
            m.grh[4] = uint8_t(paylen >> 8);
            m.grh[5] = uint8_t(paylen);
        }
    } else {
        buf_.clear();
    }
    if (w.opcode == IBV_WR_RDMA_READ) {
        uint64_t total = 0;
        for (uint32_t i = 0; i < std::min(w.num_sge, kMaxSge); ++i) total += w.sge[i].length;
        if (w.num_sge > kMaxSge || total > limits::kMaxMsgSize) return IBV_WC_LOC_LEN_ERR;
        m.length = uint32_t(total);
    }
    if (w.opcode == IBV_WR_ATOMIC_WRITE && m.size != 8 && buf_.size() != 8) return IBV_WC_LOC_LEN_ERR;
    if (w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        if (w.num_sge < 1 || w.sge[0].length != 8) return IBV_WC_LOC_LEN_ERR;
        m.length = 8;
    }
    if (!src_iov_.empty() || (carries_payload(w.opcode) && buf_.empty() && !(w.send_flags & IBV_SEND_INLINE))) {
        m.data = nullptr; // streamed from the sender by the (local) responder
        m.src_pid = qp.owner->pid;
        m.src_iov = &src_iov_;
        m.size = 0;
        for (const iovec &v : src_iov_) m.size += v.iov_len;
    } else {
        m.data = buf_.data();
        m.size = buf_.size();
    }
    return IBV_WC_SUCCESS;
}

// Applies the responder's answer to the head WQE `w`. Returns false when
// the QP has to wait (retry timer) before anything else can go.
bool Device::handle_reply(Qp &qp, const SendWqe &w, const Reply &rep) {
    bool unreliable = qp.type == IBV_QPT_UD || qp.type == IBV_QPT_UC;
    auto finish = [&](ibv_wc_status st) {
        if (!qp.pending.empty()) qp.pending.pop_front();
        ++qp.head_seq;
        complete_send(qp, w, st);
        if (st != IBV_WC_SUCCESS) qp_to_error(qp);
    };
    switch (rep.status) {
    case RespStatus::Ack: {
        ibv_wc_status fin = IBV_WC_SUCCESS;
        if (rep.size()) {
            uint32_t n = w.opcode == IBV_WR_RDMA_READ ? std::min(w.num_sge, kMaxSge) : 1;
            fin = scatter(*qp.owner, qp.pd, w.sge, n, rep.bytes(), rep.size());
        }
        qp.counters_loaded = false; // forward progress resets the retry budgets
        finish(fin);
        return true;
    }
    case RespStatus::Discard: // the responder wants an earlier request first: resend
    case RespStatus::Drop:
        if (unreliable) { // the sender never knows
            finish(IBV_WC_SUCCESS);
            return true;
        }
        if (qp.attr.timeout == 0 || qp.retry_left > 0) {
            // A real requester hears nothing of a dropped request: its ACK timer runs out, then it resends.
            if (qp.attr.timeout) qp.retry_left--;
            qp.retry_at_ns = now_ns() + ack_timeout_ns(qp.attr.timeout);
            timed_.insert(qp.qpn);
            count_ack_timeout();
            return false;
        }
        finish(IBV_WC_RETRY_EXC_ERR);
        return true;
    case RespStatus::RnrNak:
        if (qp.attr.rnr_retry == 7 || qp.rnr_left > 0) {
            if (qp.attr.rnr_retry != 7) qp.rnr_left--;
            qp.retry_at_ns = now_ns() + rnr_delay_ns(rep.rnr_timer);
            timed_.insert(qp.qpn);
            return false;
        }
        finish(IBV_WC_RNR_RETRY_EXC_ERR);
        return true;
    case RespStatus::RemAccess: finish(IBV_WC_REM_ACCESS_ERR); return true;
    case RespStatus::RemInvReq: finish(IBV_WC_REM_INV_REQ_ERR); return true;
    case RespStatus::RemOp: finish(IBV_WC_REM_OP_ERR); return true;
    }
    return true;
}

// Drops every request of this QP that is on the wire: their replies, if
// any arrive, are ignored, and the window restarts at the head.
void Device::forget_inflight(Qp &qp) {
    for (size_t i = 0; i < qp.tokens.size(); ++i) {
        inflight_.erase(qp.tokens[i]);
        retired_[qp.tokens[i]] = {qp.qpn, qp.stream, qp.head_seq + i};
    }
    while (retired_.size() > 4096) retired_.erase(retired_.begin()); // the oldest tokens
    qp.tokens.clear();
    qp.sent_bytes.clear();
    qp.sent = 0;
    qp.ack_due_ns = 0;
}

// Sends pending[sent] to a remote responder; false when the window is full
// or that WQE cannot be sent yet.
bool Device::send_next_remote(Qp &qp, uint16_t dlid) {
    constexpr uint32_t kWindow = 16;
    constexpr size_t kMaxBytes = size_t(4) << 20; // keeps the head reply well inside ACK timeouts
    size_t bytes = 0;
    for (size_t b : qp.sent_bytes) bytes += b;
    if (qp.sent >= qp.pending.size() || qp.sent >= kWindow || bytes >= kMaxBytes) return false;
    const SendWqe w = qp.pending[qp.sent];
    if (is_local_op(w.opcode)) return false; // runs when it reaches the head
    Message m;
    uint16_t d2 = 0;
    if (build_message(qp, w, m, d2) != IBV_WC_SUCCESS || d2 != dlid) return false; // fails when it is the head
    m.stream = qp.stream;
    m.seq = qp.head_seq + qp.sent;
    uint64_t token = ++next_token_;
    if (!net_->send_request(dlid, token, m)) return false;
    inflight_[token] = qp.qpn;
    qp.tokens.push_back(token);
    qp.sent_bytes.push_back(buf_.size() + 64);
    if (qp.sent++ == 0) qp.ack_due_ns = now_ns() + ack_timeout_ns(qp.attr.timeout);
    timed_.insert(qp.qpn);
    return true;
}

void Device::progress(Qp &qp) {
    uint64_t now = 0;
    while (!qp.pending.empty()) {
        if (qp.state == IBV_QPS_ERR) {
            flush_qp(qp);
            return;
        }
        if (qp.state != IBV_QPS_RTS) return;
        if (qp.retry_at_ns) {
            if (!now) now = now_ns();
            if (now < qp.retry_at_ns) return;
            qp.retry_at_ns = 0;
        }
        if (!qp.counters_loaded) {
            qp.rnr_left = qp.attr.rnr_retry;
            qp.retry_left = qp.attr.retry_cnt;
            qp.counters_loaded = true;
        }
        uint16_t dlid = qp.type == IBV_QPT_UD ? qp.pending.front().av.dlid : qp.attr.ah_attr.dlid;
        bool remote = dlid != cfg.lid && net_ && port_state == IBV_PORT_ACTIVE && qp.type != IBV_QPT_UD;
        if (remote && qp.sent > 0) {
            // Keep the window full; replies drive completions in order.
            while (send_next_remote(qp, dlid)) {
            }
            return;
        }
        const SendWqe w = qp.pending.front(); // copy: the responder may flush this QP
        if (is_local_op(w.opcode)) {
            ibv_wc_status st = qp.type == IBV_QPT_UD ? IBV_WC_LOC_QP_OP_ERR : local_op(qp, w);
            qp.pending.pop_front();
            ++qp.head_seq;
            complete_send(qp, w, st);
            if (st != IBV_WC_SUCCESS) qp_to_error(qp);
            continue;
        }
        Message m;
        ibv_wc_status st = build_message(qp, w, m, dlid);
        if (st != IBV_WC_SUCCESS) {
            if (!qp.pending.empty()) qp.pending.pop_front();
            ++qp.head_seq;
            complete_send(qp, w, st);
            if (qp.type != IBV_QPT_UD) qp_to_error(qp);
            continue;
        }
        if (remote) {
            if (send_next_remote(qp, dlid)) continue; // then fill the window
            Reply none;
            none.status = RespStatus::Drop; // no such LID in the fabric
            if (!handle_reply(qp, w, none)) return;
            continue;
        }
        Reply rep;
        if (port_state != IBV_PORT_ACTIVE) {
            rep.status = RespStatus::Drop; // the link is down: nothing leaves
        } else if (dlid == cfg.lid) {
            rep = respond(m);
        } else if (qp.type == IBV_QPT_UD && dlid >= limits::kMcastLidBase && dlid != 0xffff) {
            rep.status = RespStatus::Drop; // sent; this node's members, then every other node's
            if (m.dst_qpn == limits::kMulticastQpn) { // (a unicast QPN reaches no member)
                respond_mcast(m);
                if (net_) net_->send_to_all(m);
            }
        } else if (net_ && qp.type == IBV_QPT_UD) {
            net_->send_request(dlid, 0, m); // datagrams need no answer
            rep.status = RespStatus::Drop;   // ... and are "done" once sent
        } else {
            rep.status = RespStatus::Drop;
        }
        if (!handle_reply(qp, w, rep)) return;
    }
}

// The ACK of an earlier transmission of the head arrived after the ACK timeout
// resent it: like an ACK carrying the head's PSN on real RC, it counts.
void Device::on_late_reply(uint64_t token, const Reply &r) {
    auto it = retired_.find(token);
    if (it == retired_.end()) return;
    Retired o = it->second;
    retired_.erase(it);
    Qp *qp = qp_by_num(o.qpn);
    if (r.status != RespStatus::Ack || !qp || qp->state != IBV_QPS_RTS || qp->stream != o.stream ||
        qp->head_seq != o.seq || qp->pending.empty())
        return;
    if (qp->sent) { // tokens[0] is the head's retransmission: its answer is a duplicate now
        inflight_.erase(qp->tokens.front());
        qp->tokens.pop_front();
        qp->sent_bytes.pop_front();
        qp->sent--;
    }
    qp->ack_due_ns = qp->sent ? now_ns() + ack_timeout_ns(qp->attr.timeout) : 0;
    qp->retry_at_ns = 0;
    timed_.insert(qp->qpn);
    const SendWqe w = qp->pending.front();
    handle_reply(*qp, w, r);
    progress(*qp);
}

void Device::on_remote_reply(uint64_t token, const Reply &r) {
    auto it = inflight_.find(token);
    if (it == inflight_.end()) return on_late_reply(token, r); // or stale: that request was given up
    uint32_t qpn = it->second;
    inflight_.erase(it);
    Qp *qp = qp_by_num(qpn);
    if (!qp || qp->tokens.empty() || qp->tokens.front() != token || qp->pending.empty()) return;
    qp->tokens.pop_front();
    qp->sent_bytes.pop_front();
    qp->sent--;
    const SendWqe w = qp->pending.front();
    if (r.status == RespStatus::Ack || qp->type == IBV_QPT_UC) {
        // (UC has no retransmission: whatever the answer, the head is done.)
        qp->ack_due_ns = qp->sent ? now_ns() + ack_timeout_ns(qp->attr.timeout) : 0;
        timed_.insert(qp->qpn);
        handle_reply(*qp, w, r);
    } else {
        // Anything but an ACK for the head: the rest of the window was not
        // executed (the responder discards out-of-sequence requests); go back
        // to the head, after the back-off handle_reply chooses.
        forget_inflight(*qp);
        handle_reply(*qp, w, r);
    }
    progress(*qp);
}

// No reply for the head within the local ACK timeout: resend the window
// (retry_cnt times; 7 is not special for transport retries).
void Device::on_ack_timeout(Qp &qp) {
    forget_inflight(qp);
    if (qp.pending.empty()) return;
    if (qp.attr.timeout != 0 && qp.retry_left <= 0) {
        const SendWqe w = qp.pending.front();
        qp.pending.pop_front();
        ++qp.head_seq;
        complete_send(qp, w, IBV_WC_RETRY_EXC_ERR);
        qp_to_error(qp);
        return;
    }
    if (qp.attr.timeout) qp.retry_left--;
    count_ack_timeout();
    progress(qp);
}

void Device::count_ack_timeout() {
    ++counters.local_ack_timeout_err;
    (void)write_port_counters(cfg.sysfs_dir, counters); // a stale file only misleads readers; the count stays
}

void Device::on_timers(uint64_t now) {
    std::vector<uint32_t> due;
    for (auto it = timed_.begin(); it != timed_.end();) {
        Qp *qp = qp_by_num(*it);
        if (!qp || (!qp->retry_at_ns && !qp->ack_due_ns)) {
            it = timed_.erase(it); // nothing armed any more
            continue;
        }
        if ((qp->retry_at_ns && qp->retry_at_ns <= now) || (qp->ack_due_ns && qp->ack_due_ns <= now))
            due.push_back(*it);
        ++it;
    }
    for (uint32_t qpn : due) {
        Qp *qp = qp_by_num(qpn);
        if (!qp) continue;
        if (qp->ack_due_ns && qp->ack_due_ns <= now) {
            on_ack_timeout(*qp);
        } else {
            // Consume the expired timer here: progress() keeps it when the
            // QP has nothing to send or left RTS, and a timer that stays
            // expired would make epoll_wait return at once, forever.
            qp->retry_at_ns = 0;
            progress(*qp);
        }
    }
}

uint64_t Device::next_timer_ns() const {
    uint64_t best = 0;
    for (uint32_t qpn : timed_) {
        auto it = qps_.find(qpn);
        if (it == qps_.end()) continue;
        for (uint64_t t : {it->second->retry_at_ns, it->second->ack_due_ns})
            if (t && (!best || t < best)) best = t;
    }
    return best;
}

bool Device::idle() const { return next_timer_ns() == 0; }

} // namespace simhca
