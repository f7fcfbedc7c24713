// SPDX-License-Identifier: BSD-3-Clause
// The module's service thread (btl_xrc_async_progress, on by default): it sleeps in poll() on the connection
// manager's completion channel and the device's async fd, so that a process answers other processes' connection
// requests and closes, retransmits its own, and hears of device events even while every application thread
// computes; idle, it costs one blocked poll(). It never calls up into Open MPI: the connection manager records
// what must reach ob1 or a send queue (src/core/connection_manager.h), async events are read, acknowledged and
// recorded here, and progress acts on both (PortTransport::tick, mca_btl_xrc_service_progress).
#include "btl_xrc.h"
#include "btl_xrc_job.h"

#include "src/core/port_transport.h"
#include "src/core/service_thread.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

thread_local xrc::PortTransport *mca_btl_xrc_serving = nullptr;

void mca_btl_xrc_wake_progress() noexcept {
    // Only the transport this service thread serves: it lives until the thread is joined, while another module's
    // may be finalized (and destroyed) meanwhile.
    if (mca_btl_xrc_serving != nullptr) mca_btl_xrc_serving->raise();
}

struct mca_btl_xrc_service_t {
    std::mutex events_mutex;
    std::vector<xrc::AsyncEventRecord> events;  // read and acknowledged, waiting for progress
    std::unique_ptr<xrc::ServiceThread> thread;
};

namespace {

// Service thread: every async event that can be read now is recorded, acknowledged at once (a QP or SRQ being
// destroyed waits for its events' acknowledgements), and progress is told.
void read_async_events(mca_btl_xrc_module_t *m) noexcept {
    mca_btl_xrc_service_t &s = *m->service;
    ibv_async_event event{};
    while (ibv_get_async_event(m->transport->context(), &event) == 0) {
        try {
            std::lock_guard<std::mutex> guard(s.events_mutex);
            s.events.push_back(xrc::record_event(event));
        } catch (...) {  // out of memory: the event is lost, as the device may lose them
        }
        ibv_ack_async_event(&event);
        m->transport->raise();
    }
}

}  // namespace

int mca_btl_xrc_service_start(mca_btl_xrc_module_t *m) noexcept {
    xrc::PortTransport *t = m->transport.get();
    std::string error;
    try {
        m->service.reset(std::make_unique<mca_btl_xrc_service_t>().release());
        mca_btl_xrc_service_t *s = m->service.get();
        std::vector<xrc::ServiceThread::Source> sources;
        // Datagrams: their senders are looked up without a PMIx call (mca_btl_xrc_job_t::port_address).
        sources.push_back({t->cm_event_fd(), [t] {
                               mca_btl_xrc_serving = t;
                               t->serve_cm();
                               mca_btl_xrc_serving = nullptr;
                           }});
        sources.push_back({t->context()->async_fd, [m] { read_async_events(m); }});
        s->thread = std::make_unique<xrc::ServiceThread>(std::move(sources), [t] { return t->serve_timers(); });
        xrc::ServiceThread *thread = s->thread.get();
        t->on_timers_changed([thread] { thread->wake(); });
        const auto started = s->thread->start("btl-xrc-svc");
        if (started) return OPAL_SUCCESS;
        error = started.error().message();
    } catch (...) {
        error = "out of memory";
    }
    opal_output(0, "btl:xrc: %s: %s:%u: no service thread (%s): set btl_xrc_async_progress 0",
                opal_process_info.nodename, t->device_name().c_str(), t->port_num(), error.c_str());
    mca_btl_xrc_service_stop(m);
    return OPAL_ERROR;
}

void mca_btl_xrc_service_delete::operator()(mca_btl_xrc_service_t *service) const noexcept {
    service->thread.reset();  // joined: nothing serves the transport from now on
    std::default_delete<mca_btl_xrc_service_t>()(service);
}

void mca_btl_xrc_service_stop(mca_btl_xrc_module_t *m) noexcept {
    if (m->service == nullptr) return;
    // the thread may still be serving the transport until it is joined: it must not wake a thread being destroyed
    if (m->transport != nullptr) m->transport->on_timers_changed({});
    m->service.reset();
}

void mca_btl_xrc_service_progress(mca_btl_xrc_module_t *m) noexcept {
    // The peers whose datagrams the service thread dropped for want of their address: fetched here, so that their
    // next retransmission is answered.
    if (mca_btl_xrc_job_t *job = mca_btl_xrc_component.job.get();
        job != nullptr && job->addresses_wanted.load(std::memory_order_relaxed))
        job->fetch_wanted_addresses();
    mca_btl_xrc_service_t *s = m->service.get();
    if (s == nullptr) return;
    std::vector<xrc::AsyncEventRecord> events;
    {
        std::lock_guard<std::mutex> guard(s->events_mutex);
        if (s->events.empty()) return;
        events.swap(s->events);
    }
    for (const xrc::AsyncEventRecord &event : events) mca_btl_xrc_async_event(m, event);
}
