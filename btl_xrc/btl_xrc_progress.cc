// SPDX-License-Identifier: BSD-3-Clause
// Progress: each module's eager RDMA rings and completion queue (the core's loops, src/core/eager_manager.h and
// port_progress.h; here what they hand up goes to ob1's tag callbacks), and the device's asynchronous events.
// Those are read off the async fd by the module's service thread (btl_xrc_service.cc), which records them for
// progress to act on, or, with btl_xrc_async_progress 0, by Open MPI's event loop; either way an idle process makes no
// system call for them, and what an event means is decided here, in progress (mca_btl_xrc_async_event).
#include "btl_xrc_eager.h"
#include "btl_xrc_frag.h"
#include "btl_xrc_job.h"
#include "btl_xrc_rdma.h"

#include "src/core/port_progress.h"

#include <fcntl.h>

#include <cstring>

namespace {

// What the port's completion loop (src/core/port_progress.h) tells the module: messages for ob1's callbacks,
// eager RDMA control messages, drops and failures.
struct CompletionSink {
    mca_btl_xrc_module_t *m;

    [[gnu::always_inline]] bool deliver(uint8_t tag, unsigned char *data, uint32_t length) noexcept {
        const mca_btl_active_message_callback_t *reg = &m->receive_callbacks[tag];
        if (OPAL_UNLIKELY(reg->cbfunc == nullptr)) {
            no_handler(tag, length);
            return false;
        }
        mca_btl_xrc_deliver(m, reg, tag, data, length);
        return true;
    }
    void control(const unsigned char *data, uint32_t length) noexcept { mca_btl_xrc_eager_control(m, data, length); }
    [[gnu::cold]] void dropped(uint32_t length, uint32_t imm) noexcept {
        BTL_XRC_VERBOSE(1, "btl:xrc: dropped a %u-byte message with immediate data 0x%08x (no handler)", length, imm);
    }
    [[gnu::cold]] void receive_failed(ibv_wc_status status) noexcept {
        BTL_XRC_VERBOSE(1, "btl:xrc: receive completion error: %s", ibv_wc_status_str(status));
    }
    [[gnu::cold]] void send_failed(xrc::SendQueue &queue, const ibv_wc &wc) noexcept {
        mca_btl_xrc_choose_outage_ride(m, queue);
        mca_btl_xrc_report_failed_completion(m, queue, wc);
    }
    [[gnu::cold]] void no_handler(uint8_t tag, uint32_t length) noexcept {
        BTL_XRC_VERBOSE(1, "btl:xrc: %s:%u: dropped a %u-byte message for tag %u (no handler)",
                        m->transport->device_name().c_str(), m->transport->port_num(), length, tag);
    }
};

// With several rails and failover on: every SRQ message's source is counted as well (a copy sent again after a
// rail's loss is checked against what the rail delivered, btl_xrc_failover.cc). Chosen at btl_init with the sends.
struct CountingSink : CompletionSink {
    static constexpr bool kCountsSources = true;
    [[gnu::always_inline]] void took(const ibv_wc &wc, bool first) noexcept {
        m->srq_taken.count(xrc::source_key(wc.qp_num, wc.src_qp), first);
    }
};

// Without a service thread: Open MPI's event loop (progress context) found the async fd readable.
void async_event_cb(int, short, void *arg) {
    auto *m = static_cast<mca_btl_xrc_module_t *>(arg);
    ibv_async_event event{};
    while (ibv_get_async_event(m->transport->context(), &event) == 0) {
        const xrc::AsyncEventRecord record = xrc::record_event(event);
        ibv_ack_async_event(&event);
        mca_btl_xrc_async_event(m, record);
    }
}

}  // namespace

// clang-format off
// (the switch keeps the indentation it had inside the reading loop)
void mca_btl_xrc_async_event(mca_btl_xrc_module_t *m, const xrc::AsyncEventRecord &event) noexcept {
        ++m->counters.async_events;
        mca_btl_xrc_act_on_event(m, event);
}
// clang-format on

namespace {

// The port has stayed down longer than btl_xrc_port_down_grace: its rail is given up where other rails carry its
// traffic; otherwise, riding outages (btl_xrc_outage_limit), it waits up to the limit; then the job ends, once.
// `revived`: another rail came back since the last look.
void check_port_grace(mca_btl_xrc_module_t *m, bool revived) {
    if (m->port_failure_reported || !m->transport->health().down() || !m->transport->port_grace_expired()) return;
    if (m->riding_outage && !m->transport->port_outage_expired()) {
        // Another rail came back meanwhile: this one's traffic goes there rather than wait for its port.
        if (!revived) return;
        if (mca_btl_xrc_lose_rail(m, "its port is still down and another rail reaches its peers again")) {
            m->riding_outage = false;
            m->port_failure_reported = true;
        }
        return;
    }
    if (mca_btl_xrc_resume_if_port_active(m)) return;
    m->port_failure_reported = true;
    const bool riding = m->riding_outage;
    char what[256];
    snprintf(what, sizeof(what), "the port has been down for more than %.3g s (%s)",
             double(riding ? m->transport->health().hold_limit_us() : m->transport->health().grace_us()) / 1e6,
             riding ? "btl_xrc_outage_limit" : "btl_xrc_port_down_grace");
    if (!riding) {
        // Another rail reaches every peer of this one: the job goes on over it.
        if (mca_btl_xrc_lose_rail(m, what)) return;
        if (mca_btl_xrc_outage_enabled() && !m->transport->port_outage_expired()) {
            m->riding_outage = true;
            m->port_failure_reported = false;
            opal_output(0,
                        "btl:xrc: %s: %s: %s, and no other rail carries its traffic: its sends stay held for up "
                        "to %.3g s in all (btl_xrc_outage_limit)",
                        opal_process_info.nodename, m->transport->rail_name().c_str(), what,
                        double(m->transport->health().hold_limit_us()) / 1e6);
            return;
        }
    }
    strncat(what, ": giving up on the sends held since it went down", sizeof(what) - strlen(what) - 1);
    mca_btl_xrc_report_error(m, nullptr, what);
}

// The rings and the completion queue, under the module's lock.
template <class Sink = CompletionSink>
[[gnu::always_inline]] inline int poll_module(mca_btl_xrc_module_t *m) noexcept {
    // A call that found eager RDMA messages has done its work: the completion queue (send completions, SRQ
    // messages) waits for the next call, but never more than kMaxCqSkips calls, so a peer that keeps its ring
    // full cannot starve the others.
    constexpr uint32_t kMaxCqSkips = 4;
    const int eager = mca_btl_xrc_eager_progress(m);
    if (eager > 0 && ++m->cq_skips < kMaxCqSkips) return eager;
    m->cq_skips = 0;
    Sink sink{{m}};
    return eager + m->transport->progress(sink);
}

}  // namespace

int mca_btl_xrc_poll_module(mca_btl_xrc_module_t *m) noexcept {
    return mca_btl_xrc_failover_enabled() ? poll_module<CountingSink>(m) : poll_module(m);
}

void mca_btl_xrc_drain_completions(mca_btl_xrc_module_t *m) noexcept {
    // Bounded: a peer that keeps sending cannot hold the caller here.
    // With failover on, what is drained is counted as always (a rail is drained before it is given up).
    if (mca_btl_xrc_failover_enabled()) {
        for (int i = 0; i < 64 && poll_module<CountingSink>(m) > 0; ++i) {
        }
        return;
    }
    for (int i = 0; i < 64 && poll_module(m) > 0; ++i) {
    }
}

namespace {

// Connection work (it makes QPs: never under the data-path lock, which tick() takes itself for the queues), the
// events the service thread recorded, the port's grace: rare, so kept out of the polling path. Every progressing
// thread may find the transport busy; one serves it at a time (the others go on), so what it tests and sets (the
// port's health, the failure reported once, the loopback's state) is touched by one thread after another, each
// seeing what the one before did.
[[gnu::cold, gnu::noinline]] void serve_transport(mca_btl_xrc_module_t *m) noexcept {
    if (m->serving.exchange(true, std::memory_order_acquire)) return;
    mca_btl_xrc_ft_serve();
    m->transport->tick();
    mca_btl_xrc_service_progress(m);
    mca_btl_xrc_failover_serve(m);
    bool adopting;
    {
        const std::lock_guard<std::mutex> tables(mca_btl_xrc_component.tables_mutex);
        adopting = !m->adopting.empty();
    }
    if (adopting) mca_btl_xrc_adopt_endpoints(m, false);
    const uint32_t revivals = mca_btl_xrc_rail_revivals();
    const bool revived = revivals != m->revivals_seen;
    m->revivals_seen = revivals;
    if (revived) mca_btl_xrc_hand_over_riding(m);
    check_port_grace(m, revived);
    m->serving.store(false, std::memory_order_release);
}

template <class Sink = CompletionSink>
[[gnu::always_inline]] inline int poll_all() noexcept {
    int count = 0;
    for (const auto &module : mca_btl_xrc_component.modules)
        if (OPAL_LIKELY(module->transport != nullptr)) count += poll_module<Sink>(module.get());
    return count;
}

// threads: other threads may be in the BTL (MPI_THREAD_MULTIPLE): one thread polls the modules at a time, the
// others find the lock taken and go on (what the holder completes reaches their requests through ob1). Callbacks
// fire under the (recursive) lock.
// Inline into each exported variant: Open MPI calls one of them through a pointer on every opal_progress.
template <bool threads, class Sink = CompletionSink>
[[gnu::always_inline]] inline int progress_all() noexcept {
    int count = 0;
    if constexpr (threads) {
        if (opal_mutex_trylock(&mca_btl_xrc_component.lock) == 0) {
            count = poll_all<Sink>();
            opal_mutex_unlock(&mca_btl_xrc_component.lock);
        }
        for (const auto &module : mca_btl_xrc_component.modules)
            if (OPAL_UNLIKELY(module->transport != nullptr && module->transport->busy())) serve_transport(module.get());
    } else {
        for (const auto &module : mca_btl_xrc_component.modules) {
            mca_btl_xrc_module_t *m = module.get();
            if (OPAL_UNLIKELY(m->transport == nullptr)) continue;  // finalized
            count += poll_module<Sink>(m);
            if (OPAL_UNLIKELY(m->transport->busy())) serve_transport(m);
        }
    }
    mca_btl_xrc_status_tick();
    return count;
}

}  // namespace

int mca_btl_xrc_progress_module(mca_btl_xrc_module_t *) noexcept {
    if (OPAL_UNLIKELY(mca_btl_xrc_failover_enabled()))
        return OPAL_UNLIKELY(opal_using_threads()) ? progress_all<true, CountingSink>()
                                                   : progress_all<false, CountingSink>();
    return OPAL_UNLIKELY(opal_using_threads()) ? progress_all<true>() : progress_all<false>();
}

int mca_btl_xrc_progress_unlocked() noexcept {
    return progress_all<false>();
}

int mca_btl_xrc_progress_locked() noexcept {
    return progress_all<true>();
}

int mca_btl_xrc_progress_counting_unlocked() noexcept {
    return progress_all<false, CountingSink>();
}

int mca_btl_xrc_progress_counting_locked() noexcept {
    return progress_all<true, CountingSink>();
}

void mca_btl_xrc_report_link_failure(mca_btl_xrc_module_t *m, const xrc::NodeLink *link,
                                     const std::string &why) noexcept {
    try {
        mca_btl_xrc_job_t &job = *mca_btl_xrc_component.job;
        // Several rails: the peers behind the link fail over to another rail if every one of them has one (their
        // sends queued on the link then complete with an error and go out over it). A link of a rail given up,
        // or whose peers failed over already, failing again (its close at finalize) loses nothing.
        if (link != nullptr && mca_btl_xrc_failover_enabled()) {
            bool all = true, any = m->rail_lost;
            // Every endpoint made (del_procs has taken them out of the live table by finalize).
            for (mca_btl_base_endpoint_t *endpoint : mca_btl_xrc_endpoints_of(m, true))
                if (endpoint->peer.queue == &link->queue()) {
                    any = true;
                    all = mca_btl_xrc_fail_over(m, endpoint, why.c_str()) && all;
                }
            if (any && all) {
                BTL_XRC_VERBOSE(1, "btl:xrc: %s: %s:%u: node %u: %s (its peers' traffic goes over another rail)",
                                opal_process_info.nodename, m->transport->device_name().c_str(),
                                m->transport->port_num(), link->node(), why.c_str());
                return;
            }
        }
        std::string what;
        if (link == nullptr) {
            what = why;
        } else {
            const uint32_t rank = link->owner();
            what = "cannot connect to node " + std::to_string(link->node()) + " (host " +
                   (m->transport->link_of(link->queue()) == link ? job.hostname_of(rank) : std::string("?")) +
                   ") through rank " + std::to_string(rank) + ": " + why;
        }
        // A link of another job's manager: its owner's rank is not one of this job's (no endpoint named).
        const bool own_job = link != nullptr && m->transport->link_of(link->queue()) == link;
        mca_btl_xrc_report_error(m, own_job ? mca_btl_xrc_endpoint_for(m, link->owner()) : nullptr, what.c_str());
    } catch (...) {
        mca_btl_xrc_report_error(m, nullptr, "a connection failed");
    }
}

void mca_btl_xrc_report_error(mca_btl_xrc_module_t *m, mca_btl_base_endpoint_t *endpoint, const char *what) noexcept {
    opal_proc_t *proc = endpoint != nullptr ? endpoint->proc : nullptr;
    // Under ULFM ob1 takes an error naming a process for that process's death, and the job goes on without it: a
    // failure of ours that no death explains names nobody, so the job ends (with the message) instead.
    opal_proc_t *culprit = mca_btl_xrc_ft_enabled() && endpoint != nullptr && !endpoint->dead ? nullptr : proc;
    char peer[128] = "";
    if (proc != nullptr) {
        const char *peer_host = mca_btl_xrc_proc_hostname(proc);
        snprintf(peer, sizeof(peer), " (peer rank %u on %s)", proc->proc_name.vpid,
                 peer_host != nullptr ? peer_host : "an unknown host");
    } else if (endpoint != nullptr && !endpoint->other_job) {  // its proc let go of at del_procs: the rank still says
        snprintf(peer, sizeof(peer), " (peer rank %u on %s)", endpoint->peer.rank,
                 mca_btl_xrc_component.job->hostname_of(endpoint->peer.rank).c_str());
    }
    char message[1024];
    snprintf(message, sizeof(message), "btl:xrc: %s: %s:%u: %s%s", opal_process_info.nodename,
             m->transport->device_name().c_str(), m->transport->port_num(), what, peer);
    if (m->finalizing) {
        ++m->finalize_errors;
        opal_output(0, "%s (during MPI_Finalize: work accepted earlier was not delivered)", message);
    } else if (m->error_cb != nullptr) {
        if (culprit != proc) opal_output(0, "%s", message);
        m->error_cb(&m->super, MCA_BTL_ERROR_FLAGS_FATAL, culprit, message);
    } else
        opal_output(0, "%s", message);
}

void mca_btl_xrc_async_init(mca_btl_xrc_module_t *m) noexcept {
    const int fd = m->transport->context()->async_fd;
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return;
    if (m->service != nullptr) return;  // its thread reads the fd
    opal_event_set(opal_sync_event_base, &m->async_event, fd, OPAL_EV_READ | OPAL_EV_PERSIST, async_event_cb, m);
    opal_event_add(&m->async_event, nullptr);
    m->async_event_active = true;
}

void mca_btl_xrc_async_fini(mca_btl_xrc_module_t *m) noexcept {
    if (!m->async_event_active) return;
    opal_event_del(&m->async_event);
    m->async_event_active = false;
}
