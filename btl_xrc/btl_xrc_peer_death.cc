// SPDX-License-Identifier: BSD-3-Clause
// A process of the job dies and the job goes on: User-Level Failure Mitigation (Open MPI 5.0, mpirun --with-ft
// ulfm), mapped onto ob1. ob1 learns of a death from the runtime itself, but tells no BTL; so the BTL learns of it
// from every source it has, and acts once per rank:
//   - the runtime's event (PMIx: a process terminated), handed from the runtime's thread to progress;
//   - a refused request: the dead rank's SRQ (or eager ring, or window) is gone with it, and its node's HCA refuses
//     what still names it. The send queue takes the refusal at the cost of that request alone
//     (xrc::SendQueue::requeue_refused: every send is kept until its completion, by its fragment or, inline, as a
//     copy in the queue: SendQueue::keep_copies), and the link connects again for the node's other ranks, which lose
//     nothing.
// Acting on a death: the rank's endpoints on every module send nothing more (their queue is one that refuses
// everything: ob1 hears OPAL_ERR_UNREACH, which it turns into MPIX_ERR_PROC_FAILED), what was queued for it is
// dropped without calling ob1 back (mca_btl_xrc_send_complete says why), its links and TGT QPs go
// (xrc::ConnectionManager::peer_died), and a death the BTL found itself is reported to ob1 as that process's failure
// (non-fatal: ob1 marks it failed and tells the others).
// Without ULFM (and on Open MPI 4.1) none of this runs: a death ends the job as before.
#include "btl_xrc_frag.h"
#include "btl_xrc_job.h"

#include "src/core/port_transport.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace {

bool ft_on = false;

// Ranks the runtime said died, for progress (the runtime's thread must not call into ob1 or the core's queues), and
// the deaths found here that ob1 is still to hear of: told from the next progress call, outside the completion
// loop that found them (a send queue may be half-way through taking a refusal there).
struct DeathReport {
    opal_proc_t *proc;
    std::string message;
};
std::mutex deaths_mutex;
std::vector<uint32_t> deaths;
std::vector<DeathReport> reports;
std::atomic<bool> deaths_pending{false};

void raise_all() noexcept {
    deaths_pending.store(true, std::memory_order_release);
    for (const auto &module : mca_btl_xrc_component.modules)
        if (module->transport != nullptr) module->transport->raise();
}

// The send queue of every dead rank's endpoint: broken from the start, so that a send to it fails at the post.
xrc::SendQueue &refusing_queue() noexcept {
    static xrc::SendQueue queue(1, 1, 0);
    static const bool broken = (queue.fail(IBV_WC_REM_ABORT_ERR), true);
    (void)broken;
    return queue;
}

void runtime_says_died(uint32_t rank) noexcept {
    try {
        const std::lock_guard<std::mutex> guard(deaths_mutex);
        deaths.push_back(rank);
    } catch (...) {  // out of memory: its queued sends are refused by its node one by one instead
        return;
    }
    raise_all();
}

// The ranks of the node `rank` runs on (empty if unknown): from the node map when connections are made eagerly,
// else from every rank's host name, looked up once, at the first death (O(ranks), and only after a failure).
std::vector<uint32_t> ranks_on_node_of(uint32_t rank) noexcept {
    try {
        mca_btl_xrc_job_t &job = *mca_btl_xrc_component.job;
        if (job.map != nullptr) {
            if (rank >= job.map->rank_count()) return {};
            return job.map->ranks_on(job.map->node_of(rank));
        }
        static std::once_flag looked_up;
        static std::vector<std::string> hosts;
        std::call_once(looked_up, [&job] {
            hosts.resize(job.size);
            for (uint32_t r = 0; r < job.size; ++r) hosts[r] = job.hostname_of(r);
        });
        if (rank >= hosts.size() || hosts[rank] == "?") return {};
        std::vector<uint32_t> mates;
        for (uint32_t r = 0; r < hosts.size(); ++r)
            if (hosts[r] == hosts[rank]) mates.push_back(r);
        return mates;
    } catch (...) {  // out of memory: the node's connection times out instead
        return {};
    }
}

}  // namespace

void mca_btl_xrc_ft_init() noexcept {
    ft_on = mca_btl_xrc_compat_ft_enabled();
    (void)refusing_queue();
    if (ft_on) mca_btl_xrc_compat_watch_deaths(runtime_says_died);
}

void mca_btl_xrc_ft_fini() noexcept {
    if (ft_on) mca_btl_xrc_compat_unwatch_deaths();
}

bool mca_btl_xrc_ft_enabled() noexcept {
    return ft_on;
}

void mca_btl_xrc_peer_died(uint32_t rank, const char *why) noexcept {
    opal_proc_t *proc = nullptr;
    mca_btl_xrc_module_t *reporter = nullptr;
    const std::vector<uint32_t> mates = ranks_on_node_of(rank);
    for (const auto &module : mca_btl_xrc_component.modules) {
        mca_btl_xrc_module_t *m = module.get();
        if (m->transport == nullptr) continue;
        const BtlXrcLock guard(m->lock);
        mca_btl_base_endpoint_t *endpoint = mca_btl_xrc_endpoint_for(m, rank);
        if (endpoint == nullptr) {
            // ob1 adds processes when it first sends to them: none yet. The manager remembers the rank, so that no
            // connection to its node is made through it later.
            m->transport->peer_died(rank);
        } else if (!endpoint->dead) {
            endpoint->dead = true;
            m->transport->peer_died(rank);  // while the endpoint is still one of its link's peers: its queued sends go
            m->transport->detach(endpoint->peer);
            endpoint->peer.queue = &refusing_queue();
            if (reporter == nullptr) {
                reporter = m;
                proc = endpoint->proc;
            }
        } else {
            continue;  // known already
        }
        // The last rank of its node: that node crashed, and the connection to it goes (nobody answers there).
        if (!mates.empty() &&
            std::all_of(mates.begin(), mates.end(), [m](uint32_t r) { return m->transport->is_dead(r); }))
            m->transport->node_died(rank);
    }
    if (reporter == nullptr) return;
    char message[512];
    try {
        snprintf(message, sizeof(message), "btl:xrc: %s: %s: rank %u (host %s) died: %s", opal_process_info.nodename,
                 reporter->transport->rail_name().c_str(), rank, mca_btl_xrc_component.job->hostname_of(rank).c_str(),
                 why != nullptr ? why : "the runtime said so");
    } catch (...) {  // out of memory for the names
        snprintf(message, sizeof(message), "btl:xrc: rank %u died", rank);
    }
    BTL_XRC_VERBOSE(1, "%s", message);
    // The runtime's own word reached ob1 already; a death found here is ob1's news too (it marks the process failed,
    // and tells the other processes), from the next progress call.
    if (why == nullptr || proc == nullptr) return;
    try {
        const std::lock_guard<std::mutex> guard(deaths_mutex);
        reports.push_back({proc, message});
    } catch (...) {  // out of memory: ob1 hears of it from the runtime only
        return;
    }
    raise_all();
}

void mca_btl_xrc_ft_serve() noexcept {
    if (!deaths_pending.load(std::memory_order_acquire)) return;
    std::vector<uint32_t> taken;
    std::vector<DeathReport> told;
    {
        const std::lock_guard<std::mutex> guard(deaths_mutex);
        taken.swap(deaths);
        told.swap(reports);
        deaths_pending.store(false, std::memory_order_relaxed);
    }
    for (uint32_t rank : taken) mca_btl_xrc_peer_died(rank, nullptr);
    for (DeathReport &report : told)
        for (const auto &module : mca_btl_xrc_component.modules)
            if (module->transport != nullptr && !module->finalizing && module->error_cb != nullptr) {
                module->error_cb(&module->super, MCA_BTL_ERROR_FLAGS_NONFATAL, report.proc, report.message.data());
                break;
            }
}
