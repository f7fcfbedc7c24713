// SPDX-License-Identifier: BSD-3-Clause
// This process's status record for xrc-status: one file per process next to the job's XRC domain file
// (btl_xrc_xrcd_dir, by default the job session directory), holding what every module (port) holds and counts
// (src/core/status_record.h). Nothing of it is on the data path: the transports' listener says when a connection
// event happened (a QP made, readied, opened or destroyed, a connection failed), which makes the next progress
// call look; otherwise progress looks every kCheckEvery calls, reads a clock and refreshes the record every
// btl_xrc_status_interval seconds (src/core/status_schedule.h bounds what writing costs at scale). A record that
// cannot be written is reported once (btl_xrc_verbose 1), and the process stops writing it.
//
// Size: one record per process, O(nodes contacted + TGT QPs made + handles held) lines; host names are looked up
// once per node contacted.
// Threads: any application thread may reach these functions (progress, connection events); one at a time touches
// the writer (writer_mutex). A thread that finds it taken on a periodic look skips it: the holder is writing.
// A connection event is only flagged (change_pending), never waits for writer_mutex: the transports report events
// from inside the connection manager, under its lock, and a snapshot takes that lock under writer_mutex (describe).
// A snapshot reads the modules under the data-path lock (their send queues' state, the counters the data path
// moves): lock order writer_mutex, the data-path lock, the connection manager's. Progress may reach a periodic look
// while another thread holds the data-path lock, so a periodic look only tries it and comes back on the next
// progress call when it is taken.
#include "btl_xrc.h"

#include "src/core/port_transport.h"
#include "src/core/process_identity.h"
#include "src/core/status_file.h"
#include "src/core/status_record.h"
#include "src/core/status_schedule.h"

#include "btl_xrc_job.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace {

// Progress calls between two looks at the clock when nothing happened: a clock read per 256 calls costs nothing
// measurable, and a process that calls MPI only now and then still refreshes its record.
constexpr uint32_t kCheckEvery = 256;

std::uint64_t clock_ns(clockid_t clock) noexcept {
    timespec ts{};
    clock_gettime(clock, &ts);
    return std::uint64_t(ts.tv_sec) * 1000000000u + std::uint64_t(ts.tv_nsec);
}

struct StatusWriter {
    std::string path;
    xrc::StatusProcess process;
    xrc::StatusSchedule schedule;
    std::vector<mca_btl_xrc_module_t *> modules;      // the live ones
    std::unordered_map<uint32_t, std::string> hosts;  // by node id
    bool failed = false;

    StatusWriter(std::uint64_t interval_us, std::uint64_t now_us) : schedule(interval_us, now_us) {}

    const std::string &host_of(uint32_t node, uint32_t rank) {
        auto it = hosts.find(node);
        if (it == hosts.end()) {
            std::string host = mca_btl_xrc_component.job->hostname_of(rank);
            it = hosts.emplace(node, host == "?" ? std::string() : host).first;
        }
        return it->second;
    }

    // The process's data-path lock for a snapshot: waited for, or only tried.
    class DataLock {
    public:
        explicit DataLock(bool wait) noexcept {
            if (!opal_using_threads()) return;
            opal_recursive_mutex_t *lock = &mca_btl_xrc_component.lock;
            if (wait) {
                opal_mutex_lock(lock);
            } else if (opal_mutex_trylock(lock) != 0) {
                return;
            }
            held_ = lock;
        }
        ~DataLock() {
            if (held_ != nullptr) opal_mutex_unlock(held_);
        }
        DataLock(const DataLock &) = delete;
        DataLock &operator=(const DataLock &) = delete;
        // Another thread holds it: no snapshot now.
        bool taken() const noexcept { return opal_using_threads() && held_ == nullptr; }

    private:
        opal_recursive_mutex_t *held_ = nullptr;
    };

    // Empty when `wait` is false and another thread holds the data-path lock.
    std::optional<xrc::StatusRecord> snapshot(bool wait) {
        const DataLock locks(wait);
        if (locks.taken()) return std::nullopt;
        xrc::StatusRecord record;
        record.process = process;
        const bool finalizing =
            std::any_of(modules.begin(), modules.end(), [](const mca_btl_xrc_module_t *m) { return m->finalizing; });
        record.process.state = finalizing ? "finalizing" : "running";
        record.process.sequence = ++process.sequence;
        record.process.written_us = clock_ns(CLOCK_REALTIME) / 1000;
        for (const mca_btl_xrc_module_t *m : modules) {
            xrc::StatusPort &port = record.ports.emplace_back();
            m->transport->describe(port);
            for (xrc::StatusLink &link : port.links) link.host = host_of(link.node, link.owner);
            for (xrc::StatusTgt &tgt : port.tgts) tgt.sender_host = host_of(tgt.sender_node, tgt.sender);
            port.counters.reserve(std::size(xrc::kCounterInfo));
            for (const xrc::CounterInfo &info : xrc::kCounterInfo)
                port.counters.push_back({info.name, m->counters.*(info.field)});
        }
        return record;
    }

    // False when `wait` is false and a module's lock was taken: nothing written, still due.
    bool write(std::uint64_t now_us, bool wait) {
        const std::uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        std::string error;
        try {
            const std::optional<xrc::StatusRecord> record = snapshot(wait);
            if (!record) return false;
            const auto written = xrc::replace_file(path, xrc::encode_status(*record));
            if (!written) error = written.error().message();
        } catch (...) {
            error = "out of memory";
        }
        schedule.wrote(now_us, clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu);
        if (error.empty()) return true;
        failed = true;
        BTL_XRC_VERBOSE(1, "btl:xrc: %s: no status record for xrc-status from now on: %s", opal_process_info.nodename,
                        error.c_str());
        return true;
    }
};

std::unique_ptr<StatusWriter> writer;
std::mutex writer_mutex;
// A connection event since the last look (mca_btl_xrc_status_changed), taken in by the next one.
std::atomic<bool> change_pending{false};

// No record from now on: the file goes. The caller holds writer_mutex.
void release_writer() noexcept {
    mca_btl_xrc_component.status_countdown = UINT32_MAX;
    if (!writer) return;
    (void)unlink(writer->path.c_str());
    writer.reset();
}

}  // namespace

void mca_btl_xrc_status_init(const mca_btl_xrc_modules_t &modules, const std::string &dir,
                             const std::string &job_name) noexcept {
    const std::lock_guard<std::mutex> guard(writer_mutex);
    const int interval = mca_btl_xrc_component.params.status_interval;
    mca_btl_xrc_component.status_countdown = UINT32_MAX;
    if (interval < 0 || modules.empty() || writer) return;
    try {
        const mca_btl_xrc_job_t &job = *mca_btl_xrc_component.job;
        auto w = std::make_unique<StatusWriter>(std::uint64_t(interval) * 1000000u, clock_ns(CLOCK_MONOTONIC) / 1000);
        w->path = dir + "/" + xrc::status_file_name(job_name, job.my_rank);
        for (const auto &module : modules) w->modules.push_back(module.get());
        xrc::StatusProcess &p = w->process;
        p.pid = static_cast<uint32_t>(getpid());
        p.start_ticks = xrc::process_start_ticks(getpid()).value_or(0);
        p.boot_id = xrc::kernel_boot_id();
        p.host = opal_process_info.nodename != nullptr ? opal_process_info.nodename : "";
        p.uid = static_cast<uint32_t>(getuid());
        p.jobid = static_cast<uint32_t>(job.jobid);
        p.rank = job.my_rank;
        p.local_rank = job.local_index;
        p.local_ranks = job.local_ranks;
        p.node = xrc::value_of(job.my_node_id);
        p.interval_s = static_cast<uint32_t>(interval);
        w->hosts.emplace(p.node, p.host);
        writer = std::move(w);
        BTL_XRC_VERBOSE(10, "btl:xrc: status record %s", writer->path.c_str());
        (void)writer->write(clock_ns(CLOCK_MONOTONIC) / 1000, true);
        mca_btl_xrc_component.status_countdown = writer->failed ? UINT32_MAX : kCheckEvery;
    } catch (...) {
        writer.reset();
    }
}

void mca_btl_xrc_status_changed() noexcept {
    // The next progress call looks (and finds nothing to do when there is no record).
    change_pending.store(true, std::memory_order_relaxed);
    mca_btl_xrc_component.status_countdown.store(1, std::memory_order_relaxed);
}

void mca_btl_xrc_status_poll() noexcept {
    std::unique_lock<std::mutex> guard(writer_mutex, std::try_to_lock);
    if (!guard.owns_lock()) return;  // another thread is looking; the countdown wrapped, the next look comes later
    if (!writer || writer->failed) {
        mca_btl_xrc_component.status_countdown = UINT32_MAX;
        return;
    }
    // Reset before the event flag is taken: an event flagged after this sets the countdown to 1 again.
    mca_btl_xrc_component.status_countdown = kCheckEvery;
    if (change_pending.exchange(false, std::memory_order_relaxed)) writer->schedule.changed();
    const std::uint64_t now_us = clock_ns(CLOCK_MONOTONIC) / 1000;
    // A module busy in another thread: the next progress call tries again.
    if (writer->schedule.due(now_us) && !writer->write(now_us, false))
        mca_btl_xrc_component.status_countdown.store(1, std::memory_order_relaxed);
}

void mca_btl_xrc_status_module_done(mca_btl_xrc_module_t *module) noexcept {
    const std::lock_guard<std::mutex> guard(writer_mutex);
    if (!writer) return;
    auto &modules = writer->modules;
    modules.erase(std::remove(modules.begin(), modules.end(), module), modules.end());
    if (!modules.empty() && !writer->failed) {
        (void)writer->write(clock_ns(CLOCK_MONOTONIC) / 1000, true);
        return;
    }
    release_writer();
}

void mca_btl_xrc_status_fini() noexcept {
    const std::lock_guard<std::mutex> guard(writer_mutex);
    release_writer();
}
