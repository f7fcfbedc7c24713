// SPDX-License-Identifier: BSD-3-Clause
// The port's completion loop, PortTransport::progress(Sink&): the one place that decodes the core's work request
// ids (completion_kind.h, send_queue.h, recv_pool.h) and immediate data (wire_format.h). Send completions go to
// their SendQueue (which completes each operation through its own callback), receive buffers are reposted, the
// connection manager's completions are served; the owner hears only what is its own, through a sink whose type is
// fixed at compile time (no indirect call per completion):
//   bool deliver(std::uint8_t tag, unsigned char *data, std::uint32_t length)
//       a message for `tag`, valid during the call; false when nobody handles that tag (the sink says so)
//   void control(const unsigned char *data, std::uint32_t length)
//       an eager RDMA set-up message (kImmControl): for the owner's EagerManager
//   void dropped(std::uint32_t length, std::uint32_t imm)
//       a receive without immediate data, or with immediate data that is not ours: dropped
//   void receive_failed(ibv_wc_status status)
//       a receive completed with an error other than the flush
//   void send_failed(SendQueue &queue, const ibv_wc &wc)
//       the first failed completion of a send queue (the operation it names failed; later ones are the flush),
//       or a refusal the queue takes by requeueing what followed it (queue.would_requeue(wc)), after which the
//       link connects again
// and, only if the sink declares `static constexpr bool kCountsSources = true` (several rails, failover on):
//   void took(const ibv_wc &wc, bool first)
//       an SRQ message for a tag was taken off the queue (handled or not): its source is wc.slid, wc.src_qp;
//       `first`: the first to this process over a new connection (kImmFirst)
// Called by the owner's progress, under its lock; the sink's calls come from there.
#pragma once

#include "completion_kind.h"
#include "port_transport.h"
#include "recv_pool.h"
#include "send_queue.h"
#include "wire_format.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdint>

namespace xrc {

namespace port_progress_detail {

template <class Sink>
concept CountsSources = Sink::kCountsSources;

template <class Sink>
[[gnu::always_inline]] inline void took(Sink &sink, const ibv_wc &wc, bool first) noexcept {
    if constexpr (CountsSources<Sink>) sink.took(wc, first);
}

// A receive whose immediate data carries flags or is not ours: the first message over a new connection (hold our
// own handle on the TGT QP it came through), an eager RDMA set-up message, a fence, or something to drop.
template <class Sink>
[[gnu::noinline]] void receive_flagged(PortTransport &transport, Counters &counters, const ibv_wc &wc,
                                       RecvBuffer *buffer, std::uint32_t imm, Sink &sink) noexcept {
    if ((wc.wc_flags & IBV_WC_WITH_IMM) == 0 || !imm_valid(imm)) {
        sink.dropped(wc.byte_len, imm);  // malformed or unexpected traffic never reaches a handler
        return;
    }
    if (imm & kImmFirst) transport.hold_tgt(wc.qp_num, wc.src_qp);
    if (imm & kImmNop) return;
    if (imm & kImmControl) {
        sink.control(buffer->data, wc.byte_len);
        return;
    }
    took(sink, wc, (imm & kImmFirst) != 0);
    if (sink.deliver(imm_tag(imm), buffer->data, wc.byte_len)) {
        ++counters.srq_receives;
        counters.bytes_received += wc.byte_len;
    }
}

}  // namespace port_progress_detail

template <class Sink>
[[gnu::always_inline]] inline int PortTransport::progress(Sink &sink) noexcept {
    ibv_wc wcs[64];
    const int batch = static_cast<int>(std::min<std::uint32_t>(poll_batch_, 64));
    const int n = ibv_poll_cq(cq_.get(), batch, wcs);
    for (int i = 0; i < n; ++i) {
        const ibv_wc &wc = wcs[i];
        switch (completion_kind(wc.wr_id)) {
            case CompletionKind::send: {
                SendQueue *queue = send_queue_of(wc.wr_id);
                // The first error of a QP is reported before its operations complete (with that status): the report
                // names the operation that failed. Later ones are the flush.
                if (__builtin_expect(wc.status != IBV_WC_SUCCESS, 0) && !queue->broken()) {
                    if (queue->stale(wc)) break;  // the flush of a QP the queue left after a refusal
                    ++counters_->send_errors;
                    if (wc.status == IBV_WC_RNR_RETRY_EXC_ERR) ++counters_->rnr_retry_exceeded;
                    sink.send_failed(*queue, wc);
                    // A refusal the queue takes by requeueing what followed it, or a timeout by handing back what
                    // was not acknowledged: numbering starts again first (copies are prepared from the callbacks),
                    // then the link connects again.
                    const bool requeues = queue->would_requeue(wc);
                    if (requeues) requeueing(*queue, wc.status);
                    queue->on_completion(wc);
                    if (requeues)
                        refused(*queue, wc.status);
                    else if (queue->broken())
                        broke(*queue);
                    break;
                }
                queue->on_completion(wc);
                break;
            }
            case CompletionKind::receive: {
                RecvBuffer *buffer = recv_buffer_of(wc.wr_id);
                if (wc.status == IBV_WC_SUCCESS) {
                    const std::uint32_t imm = ntohl(wc.imm_data);
                    if (__builtin_expect((imm & (kImmMarkerMask | kImmFlagMask)) == kImmMarker &&
                                             (wc.wc_flags & IBV_WC_WITH_IMM) != 0,
                                         1)) {
                        port_progress_detail::took(sink, wc, false);
                        if (__builtin_expect(sink.deliver(imm_tag(imm), buffer->data, wc.byte_len), 1)) {
                            ++counters_->srq_receives;
                            counters_->bytes_received += wc.byte_len;
                        }
                    } else {
                        port_progress_detail::receive_flagged(*this, *counters_, wc, buffer, imm, sink);
                    }
                } else if (wc.status != IBV_WC_WR_FLUSH_ERR) {
                    sink.receive_failed(wc.status);
                }
                if (__builtin_expect(wc.status != IBV_WC_WR_FLUSH_ERR && buffer->pool->repost(buffer) == 0, 1))
                    ++counters_->srq_reposts;
                else
                    buffer->pool->count_lost();
                break;
            }
            default:
                on_cm_completion(wc);
                break;
        }
    }
    return n > 0 ? n : 0;
}

}  // namespace xrc
