// SPDX-License-Identifier: BSD-3-Clause
// Asynchronous events: the daemon writes fixed-size records into the
// context's pipe (context->async_fd), so the fd is pollable and honours
// O_NONBLOCK set by the application, like the uverbs event file.
#include <cerrno>
#include <unistd.h>

#include "lib.hpp"

using namespace simhca;
using namespace simhca::lib;

SIMHCA_API int ibv_get_async_event(ibv_context *context, ibv_async_event *event) noexcept {
    if (!context || !event) return -1;
    Context *c = ctx_of(context);
    for (;;) {
        proto::AsyncRecord rec;
        ssize_t n;
        do {
            n = ::read(context->async_fd, &rec, sizeof(rec));
        } while (n < 0 && errno == EINTR);
        if (n != sizeof(rec)) return -1;
        event->event_type = ibv_event_type(rec.event_type);
        void *obj = nullptr;
        switch (event->event_type) {
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_PKEY_CHANGE:
        case IBV_EVENT_SM_CHANGE:
        case IBV_EVENT_CLIENT_REREGISTER:
        case IBV_EVENT_GID_CHANGE: event->element.port_num = int(rec.port_num); return 0;
        case IBV_EVENT_DEVICE_FATAL: event->element.port_num = 0; return 0;
        default: break;
        }
        // Events of objects destroyed meanwhile are dropped, as the kernel does.
        if (!(obj = c->find(uint32_t(rec.cookie)))) continue;
        switch (event->event_type) {
        case IBV_EVENT_CQ_ERR: {
            auto *cq = static_cast<Cq *>(obj);
            ibv_cq *ibcq = ibv_cq_ex_to_cq(&cq->cq);
            pthread_mutex_lock(&ibcq->mutex);
            ++cq->async_reported;
            pthread_mutex_unlock(&ibcq->mutex);
            event->element.cq = ibcq;
            break;
        }
        case IBV_EVENT_SRQ_ERR:
        case IBV_EVENT_SRQ_LIMIT_REACHED: {
            auto *srq = static_cast<Srq *>(obj);
            pthread_mutex_lock(&srq->srq.mutex);
            ++srq->events_reported;
            pthread_mutex_unlock(&srq->srq.mutex);
            event->element.srq = &srq->srq;
            break;
        }
        default: {
            auto *qp = static_cast<Qp *>(obj);
            pthread_mutex_lock(&qp->qpx.qp_base.mutex);
            ++qp->events_reported;
            pthread_mutex_unlock(&qp->qpx.qp_base.mutex);
            event->element.qp = &qp->qpx.qp_base;
            break;
        }
        }
        return 0;
    }
}

SIMHCA_API void ibv_ack_async_event(ibv_async_event *event) noexcept {
    if (!event) return;
    switch (event->event_type) {
    case IBV_EVENT_CQ_ERR: {
        ibv_cq *cq = event->element.cq;
        pthread_mutex_lock(&cq->mutex);
        ++cq->async_events_completed;
        pthread_cond_signal(&cq->cond);
        pthread_mutex_unlock(&cq->mutex);
        break;
    }
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: {
        ibv_srq *srq = event->element.srq;
        pthread_mutex_lock(&srq->mutex);
        ++srq->events_completed;
        pthread_cond_signal(&srq->cond);
        pthread_mutex_unlock(&srq->mutex);
        break;
    }
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
        ibv_qp *qp = event->element.qp;
        pthread_mutex_lock(&qp->mutex);
        ++qp->events_completed;
        pthread_cond_signal(&qp->cond);
        pthread_mutex_unlock(&qp->mutex);
        break;
    }
    default: break;
    }
}
