// Progress: drain each module's completion queue (receive dispatch to the tag callbacks, send/RDMA completions
// to their owners), and the device's asynchronous events, read off the async fd by Open MPI's event loop so an
// idle process makes no system call for them.
#include "btl_xrc_eager.h"
#include "btl_xrc_frag.h"
#include "btl_xrc_rdma.h"

#include "src/core/port_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>

namespace {

void dispatch_receive(mca_btl_xrc_module_t *m, const ibv_wc &wc) {
    xrc::RecvBuffer *buffer = xrc::recv_buffer_of(wc.wr_id);
    if (wc.status == IBV_WC_SUCCESS) {
        const uint32_t imm = ntohl(wc.imm_data);
        const bool has_imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
        const mca_btl_base_tag_t tag = static_cast<mca_btl_base_tag_t>(imm & 0xff);
        const mca_btl_active_message_callback_t *reg = &mca_btl_base_active_message_trigger[tag];
        if (has_imm && imm == kImmControl) {
            mca_btl_xrc_eager_control(m, buffer->data, wc.byte_len);
        } else if (has_imm && imm_valid(imm) && reg->cbfunc != nullptr) {
            ++m->stats.srq_receives;
            mca_btl_xrc_deliver(m, reg, tag, buffer->data, wc.byte_len);
        } else {
            // Malformed or unexpected traffic is dropped, never handed to a callback.
            BTL_XRC_VERBOSE(1, "btl:xrc: dropped a %u-byte message with immediate data 0x%08x (no handler)",
                            wc.byte_len, imm);
        }
    } else if (wc.status != IBV_WC_WR_FLUSH_ERR) {
        BTL_XRC_VERBOSE(1, "btl:xrc: receive completion error: %s", ibv_wc_status_str(wc.status));
    }
    if (wc.status != IBV_WC_WR_FLUSH_ERR) (void)buffer->pool->repost(buffer);
}

void dispatch_send(mca_btl_xrc_module_t *m, const ibv_wc &wc) {
    auto *queue = reinterpret_cast<xrc::SendQueue *>(wc.wr_id);
    const ibv_wc_status status = queue->on_completion(wc);
    if (status != IBV_WC_SUCCESS) {
        char what[256];
        snprintf(what, sizeof(what), "send to node %u failed: %s (vendor error 0x%x)", queue->node(),
                 ibv_wc_status_str(status), wc.vendor_err);
        mca_btl_xrc_report_error(m, nullptr, what);
    }
}

void async_event_cb(int, short, void *arg) {
    auto *m = static_cast<mca_btl_xrc_module_t *>(arg);
    ibv_async_event event{};
    while (ibv_get_async_event(m->transport->context(), &event) == 0) {
        switch (event.event_type) {
        case IBV_EVENT_SRQ_LIMIT_REACHED:
            // Buffers are reposted as soon as each message is consumed: reaching the watermark means the
            // process fell behind its senders. Re-arm and say so (RNR retry is the backstop).
            BTL_XRC_VERBOSE(10, "btl:xrc: SRQ low watermark reached; buffers are reposted as messages are consumed");
            if (event.element.srq != nullptr && event.element.srq->srq_context != nullptr)
                (void)static_cast<xrc::RecvPool *>(event.element.srq->srq_context)->arm_limit();
            break;
        case IBV_EVENT_PORT_ERR:
            mca_btl_xrc_report_error(m, nullptr, "the port went down");
            break;
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
            mca_btl_xrc_report_error(m, nullptr, ibv_event_type_str(event.event_type));
            break;
        case IBV_EVENT_DEVICE_FATAL:
            mca_btl_xrc_report_error(m, nullptr, "the device reported a fatal error");
            break;
        default:
            BTL_XRC_VERBOSE(10, "btl:xrc: async event %s", ibv_event_type_str(event.event_type));
            break;
        }
        ibv_ack_async_event(&event);
    }
}

}  // namespace

int mca_btl_xrc_progress_module(mca_btl_xrc_module_t *m) noexcept {
    // A call that found eager RDMA messages has done its work: the completion queue (send completions, SRQ
    // messages) waits for the next call, but never more than kMaxCqSkips calls, so a peer that keeps its ring
    // full cannot starve the others.
    constexpr uint32_t kMaxCqSkips = 4;
    const int eager = mca_btl_xrc_eager_progress(m);
    if (eager > 0 && ++m->cq_skips < kMaxCqSkips) return eager;
    m->cq_skips = 0;
    ibv_wc wcs[64];
    const int batch = static_cast<int>(std::min<uint32_t>(m->transport->poll_batch(), 64));
    const int n = ibv_poll_cq(m->transport->cq(), batch, wcs);
    for (int i = 0; i < n; ++i) {
        if (xrc::is_recv_wr_id(wcs[i].wr_id))
            dispatch_receive(m, wcs[i]);
        else
            dispatch_send(m, wcs[i]);
    }
    return eager + (n > 0 ? n : 0);
}

void mca_btl_xrc_report_error(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint, const char *what) noexcept {
    opal_proc_t *proc = endpoint != nullptr ? endpoint->proc : nullptr;
    const char *peer_host = proc != nullptr ? mca_btl_xrc_proc_hostname(proc) : nullptr;
    char message[512];
    snprintf(message, sizeof(message), "btl:xrc: %s: %s:%u: %s%s%s", opal_process_info.nodename,
             m->transport->device_name().c_str(), m->transport->port_num(), what,
             peer_host != nullptr ? " (peer on " : "", peer_host != nullptr ? peer_host : "");
    if (peer_host != nullptr) strncat(message, ")", sizeof(message) - strlen(message) - 1);
    if (m->error_cb != nullptr)
        m->error_cb(&m->super, MCA_BTL_ERROR_FLAGS_FATAL, proc, message);
    else
        opal_output(0, "%s", message);
}

void mca_btl_xrc_async_init(mca_btl_xrc_module_t *m) noexcept {
    const int fd = m->transport->context()->async_fd;
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return;
    opal_event_set(opal_sync_event_base, &m->async_event, fd, OPAL_EV_READ | OPAL_EV_PERSIST, async_event_cb, m);
    opal_event_add(&m->async_event, nullptr);
    m->async_event_active = true;
}

void mca_btl_xrc_async_fini(mca_btl_xrc_module_t *m) noexcept {
    if (!m->async_event_active) return;
    opal_event_del(&m->async_event);
    m->async_event_active = false;
}
