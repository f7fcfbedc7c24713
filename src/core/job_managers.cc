// SPDX-License-Identifier: BSD-3-Clause
#include "job_managers.h"

#include "cm_message.h"

#include <algorithm>

namespace xrc {

JobManagers::~JobManagers() {
    std::lock_guard<std::mutex> g(mutex_);
    entries_.clear();
}

ConnectionManager &JobManagers::meet(std::uint32_t jobid, std::unique_ptr<CmHost> host, CmConfig config) {
    std::lock_guard<std::mutex> g(mutex_);
    for (const auto &e : entries_)
        if (e->jobid == jobid && !e->retiring) return *e->cm;
    auto entry = std::make_shared<Entry>();
    entry->jobid = jobid;
    entry->host = std::move(host);
    config.other_job = true;
    config.peer_jobid = jobid;
    // Another job's ranks are not ours to tell of a LID change (announce_lid is the home manager's).
    config.job_size = 0;
    entry->cm = std::make_unique<ConnectionManager>(*entry->host, config);
    entry->cm->keep_handles_in(&home_);
    entry->cm->report_due_to(&due_);
    entries_.push_back(entry);
    return *entry->cm;
}

ConnectionManager *JobManagers::find(std::uint32_t jobid) const noexcept {
    std::lock_guard<std::mutex> g(mutex_);
    for (const auto &e : entries_)
        if (e->jobid == jobid && !e->retiring) return e->cm.get();
    return nullptr;
}

std::vector<std::shared_ptr<JobManagers::Entry>> JobManagers::snapshot() const {
    std::lock_guard<std::mutex> g(mutex_);
    return entries_;
}

bool JobManagers::on_datagram(std::span<const std::uint8_t> bytes, std::uint16_t slid, std::uint32_t src_qp) noexcept {
    const auto decoded = decode_cm(bytes);
    if (!decoded || decoded->jobid == home_.peer_jobid()) {
        home_.on_datagram(bytes, slid, src_qp);
        return true;
    }
    std::shared_ptr<Entry> target;
    {
        std::lock_guard<std::mutex> g(mutex_);
        // A retiring manager still takes its job's datagrams: CLOSEs and answers of the links it drains.
        for (const auto &e : entries_)
            if (e->jobid == decoded->jobid && (!target || target->retiring)) target = e;
    }
    if (!target) {
        home_.count_foreign(std::string("dropped a ") + cm_type_name(decoded->type) + " of job " +
                            std::to_string(decoded->jobid) + ", which this process has not met");
        return false;
    }
    target->cm->on_datagram(bytes, slid, src_qp);
    return true;
}

void JobManagers::retire(std::uint32_t jobid) noexcept {
    std::shared_ptr<Entry> entry;
    {
        std::lock_guard<std::mutex> g(mutex_);
        for (const auto &e : entries_)
            if (e->jobid == jobid && !e->retiring) entry = e;
        if (!entry) return;
        entry->retiring = true;
    }
    entry->retired_at_us = 0;  // set by the next tick (it has the clock)
    entry->cm->begin_finalize();
    due_.store(true, std::memory_order_relaxed);
}

std::string JobManagers::joined(std::string (ConnectionManager::*of)() noexcept) noexcept {
    std::string all;
    for (const auto &e : snapshot()) {
        const std::string more = ((*e->cm).*of)();
        if (!more.empty())
            all += (all.empty() ? "" : "; ") + std::string("job ") + std::to_string(e->jobid) + " " + more;
    }
    return all;
}

std::string JobManagers::leave_initiators() noexcept {
    // A retiring manager's own bounds (tick()) stay counted from its retirement: telling it again there only
    // resends what is unanswered, and finalize drops whatever is left at its own bound anyway.
    return joined(&ConnectionManager::leave_initiators);
}

void JobManagers::tick(std::uint64_t now) noexcept {
    due_.store(false, std::memory_order_relaxed);  // raised again by any manager that still wants tick()
    std::vector<std::shared_ptr<Entry>> done;
    bool still_retiring = false;
    for (const auto &e : snapshot()) {
        e->cm->tick();
        if (!e->retiring) continue;
        if (e->retired_at_us == 0) e->retired_at_us = now;
        const CmConfig &c = e->cm->config();
        const std::uint64_t age = now - e->retired_at_us;
        bool release = e->cm->finished() || age >= c.connect_timeout_us;
        if (!release && e->cm->own_work_finished()) {
            // Senders of that job still hold TGT QPs we made for them: told we leave once the leaving wait passed,
            // dropped one more leaving wait later if they did not answer (the rules of finalize).
            if (!e->told_leaving && age >= c.leaving_wait_us) {
                e->told_leaving = true;
                (void)e->cm->leave_initiators();
            } else if (e->told_leaving && age >= 2 * c.leaving_wait_us) {
                (void)e->cm->drop_initiators();
                release = e->cm->finished();
            }
        }
        if (release)
            done.push_back(e);
        else
            still_retiring = true;
    }
    // A retired manager is looked at until it is released, whatever its own timers say.
    if (still_retiring) due_.store(true, std::memory_order_relaxed);
    if (done.empty()) return;
    std::lock_guard<std::mutex> g(mutex_);
    for (const auto &d : done) entries_.erase(std::remove(entries_.begin(), entries_.end(), d), entries_.end());
}

std::uint64_t JobManagers::tick_timers() noexcept {
    std::uint64_t next = UINT64_MAX;
    for (const auto &e : snapshot()) next = std::min(next, e->cm->tick_timers());
    return next;
}

std::size_t JobManagers::size() const noexcept {
    std::lock_guard<std::mutex> g(mutex_);
    return entries_.size();
}

}  // namespace xrc
