// SPDX-License-Identifier: BSD-3-Clause
// The requester (requester.hpp): send queues -> requests.
#include "requester.hpp"

#include <algorithm>
#include <cstring>

#include "../common/limits.hpp"
#include "clock.hpp"
#include "completer.hpp"
#include "network.hpp"
#include "responder.hpp"

namespace simhca {

using namespace shm;

namespace {

bool carries_payload(uint32_t op) {
    return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE ||
           op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_ATOMIC_WRITE || op == IBV_WR_SEND_WITH_INV;
}

// Work requests the local HCA executes itself, in send-queue order.
bool is_local_op(uint32_t op) {
    return op == IBV_WR_BIND_MW || op == IBV_WR_LOCAL_INV;
}

bool uses_rkey(uint32_t op) {
    return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ ||
           op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_WRITE;
}

// An injected forgery (Qp::forge) lands on the first work request it fits (misroute: any XRC request, as each
// names the SRQ that routes it), in the requester's own copy: every (re)transmission of that request then carries
// it, as the sender's bad work request would.
void forge(Qp &qp, SendWqe &w) {
    if (qp.forge == Qp::Forge::misroute && qp.type == IBV_QPT_XRC_SEND && !is_local_op(w.opcode)) {
        w.remote_srqn = qp.forge_srqn;
        qp.forge = Qp::Forge::none;
    } else if (qp.forge == Qp::Forge::bad_rkey && uses_rkey(w.opcode)) {
        w.rkey = 0;  // ObjectTable never hands out key 0
        qp.forge = Qp::Forge::none;
    }
}

}  // namespace

void Requester::pull_sq(Qp &qp) {
    if (!qp.ctl || qp.type == IBV_QPT_XRC_RECV) return;
    if (qp.state != IBV_QPS_RTS && qp.state != IBV_QPS_ERR) return;  // WQEs wait in the ring
    RingCtl &r = qp.ctl->sq;
    uint32_t head = r.head.load(std::memory_order_acquire);
    uint32_t tail = r.tail.load(std::memory_order_relaxed);
    qp.sq_seen = head;
    if (head - tail > qp.sq_entries) {
        // The client corrupted its producer index: treat as a fatal QP error.
        r.tail.store(head, std::memory_order_release);
        objs_.qp_event(qp, IBV_EVENT_QP_FATAL);
        comp_.qp_to_error(qp);
        return;
    }
    while (tail != head && qp.pending.size() < qp.sq_entries) {
        qp.pending.push_back(qp.sq[tail & (qp.sq_entries - 1)]);
        if (qp.forge != Qp::Forge::none) forge(qp, qp.pending.back());
        ++tail;
    }
    r.tail.store(tail, std::memory_order_release);
    progress(qp);
}

// Validates the WQE's local buffers. With `lazy` (the responder is on this
// node) only the sender's address ranges are recorded in src_iov_, and the
// responder streams the bytes straight to their destination in small chunks
// (sender -> bounce buffer in cache -> receiver); otherwise the payload is
// copied into `out` now (it has to travel over the network anyway).
int Requester::gather(Qp &qp, const SendWqe &w, std::vector<uint8_t> &out, ibv_wc_status &st, bool lazy) {
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
        if (Mr *mr = objs_.mr_by_key(w.sge[i].lkey); mr && (mr->local || mr->pid != qp.owner->pid)) lazy = false;
    if (!lazy) out.resize(total);
    size_t off = 0;
    for (uint32_t i = 0; i < w.num_sge; ++i) {
        const Sge &g = w.sge[i];
        if (g.length == 0) continue;
        Mr *mr = objs_.mr_by_key(g.lkey);
        if (!mr || mr->pd != qp.pd || mr->owner != qp.owner || g.addr < mr->iova ||
            g.addr + g.length > mr->iova + mr->length)
            return st = IBV_WC_LOC_PROT_ERR, -1;
        uint64_t host = mr->addr + (g.addr - mr->iova);
        if (lazy)
            src_iov_.push_back({reinterpret_cast<void *>(host), g.length});
        else if (dma_.mr_read(*mr, host, out.data() + off, g.length))
            return st = IBV_WC_LOC_PROT_ERR, -1;
        off += g.length;
    }
    return 0;
}

// Builds the request for a WQE (gathering the payload into buf_). Returns
// a local error status when the WQE itself is bad.
ibv_wc_status Requester::build_message(Qp &qp, const SendWqe &w, Message &m, uint16_t &dlid) {
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
    const Port &port = objs_.ports[qp.rail];
    m.src_lid = port.lid;
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
            g[6] = 0x1b;  // next header: IBA transport
            g[7] = w.av.hop_limit;
            uint64_t pfx = __builtin_bswap64(port.subnet_prefix);
            uint64_t guid = __builtin_bswap64(port.port_guid);
            std::memcpy(g + 8, &pfx, 8);
            std::memcpy(g + 16, &guid, 8);
            std::memcpy(g + 24, w.av.dgid, 16);
        }
    } else {
        m.dst_qpn = qp.attr.dest_qp_num;
        dlid = qp.attr.ah_attr.dlid;
        m.dlid = dlid;  // the responder takes it only on the port with that LID
    }
    ibv_wc_status st = IBV_WC_SUCCESS;
    if (carries_payload(w.opcode)) {
        bool lazy = !ud && dlid == port.lid && !(w.send_flags & IBV_SEND_INLINE);
        gather(qp, w, buf_, st, lazy);
        if (st != IBV_WC_SUCCESS) return st;
        if (ud && buf_.size() > limits::kMaxUdPayload) return IBV_WC_LOC_LEN_ERR;
        if (ud) {
            uint16_t paylen = uint16_t(buf_.size() + 8 + 4 + 4);  // BTH + DETH + ICRC
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
        m.data = nullptr;  // streamed from the sender by the (local) responder
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

// Sends pending[sent] to a remote responder; false when the window is full
// or that WQE cannot be sent yet.
bool Requester::send_next_remote(Qp &qp, uint16_t dlid) {
    constexpr uint32_t kWindow = 16;
    constexpr size_t kMaxBytes = size_t(4) << 20;  // keeps the head reply well inside ACK timeouts
    size_t bytes = 0;
    for (size_t b : qp.sent_bytes) bytes += b;
    if (qp.sent >= qp.pending.size() || qp.sent >= kWindow || bytes >= kMaxBytes) return false;
    const SendWqe w = qp.pending[qp.sent];
    if (is_local_op(w.opcode)) return false;  // runs when it reaches the head
    Message m;
    uint16_t d2 = 0;
    if (build_message(qp, w, m, d2) != IBV_WC_SUCCESS || d2 != dlid) return false;  // fails when it is the head
    m.stream = qp.stream;
    m.seq = qp.head_seq + qp.sent;
    uint64_t token = ++next_token_;
    if (!net_->send_request(objs_.ports[qp.rail].fabric, dlid, token, m)) return false;
    comp_.track(token, qp.qpn);
    qp.tokens.push_back(token);
    qp.sent_bytes.push_back(buf_.size() + 64);
    if (qp.sent++ == 0) qp.ack_due_ns = now_ns() + ack_timeout_ns(qp.attr.timeout);
    comp_.arm_timer(qp.qpn);
    return true;
}

void Requester::progress(Qp &qp) {
    uint64_t now = 0;
    while (!qp.pending.empty()) {
        if (qp.state == IBV_QPS_ERR) {
            comp_.flush_qp(qp);
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
        // Each rail is a fabric of its own: only the LID of the QP's own port is this node.
        const Port &port = objs_.ports[qp.rail];
        bool remote = dlid != port.lid && net_ && port.state == IBV_PORT_ACTIVE && qp.type != IBV_QPT_UD;
        if (remote && qp.sent > 0) {
            // Keep the window full; replies drive completions in order.
            while (send_next_remote(qp, dlid)) {
            }
            return;
        }
        const SendWqe w = qp.pending.front();  // copy: the responder may flush this QP
        if (is_local_op(w.opcode)) {
            ibv_wc_status st = qp.type == IBV_QPT_UD ? IBV_WC_LOC_QP_OP_ERR : local_op(qp, w);
            qp.pending.pop_front();
            ++qp.head_seq;
            comp_.complete_send(qp, w, st);
            if (st != IBV_WC_SUCCESS) comp_.qp_to_error(qp);
            continue;
        }
        Message m;
        ibv_wc_status st = build_message(qp, w, m, dlid);
        if (st != IBV_WC_SUCCESS) {
            if (!qp.pending.empty()) qp.pending.pop_front();
            ++qp.head_seq;
            comp_.complete_send(qp, w, st);
            if (qp.type != IBV_QPT_UD) comp_.qp_to_error(qp);
            continue;
        }
        if (remote) {
            if (send_next_remote(qp, dlid)) continue;  // then fill the window
            Reply none;
            none.status = RespStatus::Drop;  // no such LID in the fabric
            if (!comp_.handle_reply(qp, w, none)) return;
            continue;
        }
        Reply rep;
        if (port.state != IBV_PORT_ACTIVE) {
            rep.status = RespStatus::Drop;  // the link is down: nothing leaves
        } else if (dlid == port.lid) {
            rep = resp_.respond(m);
        } else if (qp.type == IBV_QPT_UD && dlid >= limits::kMcastLidBase && dlid != 0xffff) {
            rep.status = RespStatus::Drop;             // sent; this node's members, then every other node's
            if (m.dst_qpn == limits::kMulticastQpn) {  // (a unicast QPN reaches no member)
                resp_.respond_mcast(m);
                if (net_) net_->send_to_all(port.fabric, m);
            }
        } else if (net_ && qp.type == IBV_QPT_UD) {
            net_->send_request(port.fabric, dlid, 0, m);  // datagrams need no answer
            rep.status = RespStatus::Drop;                // ... and are "done" once sent
        } else {
            rep.status = RespStatus::Drop;
        }
        if (!comp_.handle_reply(qp, w, rep)) return;
    }
}

}  // namespace simhca
