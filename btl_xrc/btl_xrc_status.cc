// SPDX-License-Identifier: BSD-3-Clause
// This process's status record for xrc-status (src/core/status_writer.h writes it), driven from progress. Nothing
// of it is on the data path: the transports' listener says when a connection event happened (a QP made, readied,
// opened or destroyed, a connection failed), which makes the next progress call look; otherwise progress looks every
// kCheckEvery calls, reads a clock and lets the writer's schedule decide. A record that cannot be written is
// reported once (btl_xrc_verbose 1), and the process stops writing it.
//
// Threads: any application thread may reach these functions (progress, connection events); one at a time touches
// the writer (writer_mutex). A thread that finds it taken on a periodic look skips it: the holder is writing.
// A connection event is only flagged (change_pending), never waits for writer_mutex: the transports report events
// from inside the connection manager, under its lock, and a snapshot takes that lock under writer_mutex (describe).
// A snapshot reads the modules under the data-path lock (their send queues' state, the counters the data path
// moves): lock order writer_mutex, the data-path lock, the connection manager's. Progress may reach a periodic look
// while another thread holds the data-path lock, so a periodic look only tries it and comes back on the next
// progress call when it is taken.
#include "btl_xrc.h"

#include "src/core/status_file.h"
#include "src/core/status_writer.h"

#include "btl_xrc_job.h"

#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>

namespace {

// Progress calls between two looks at the clock when nothing happened: a clock read per 256 calls costs nothing
// measurable, and a process that calls MPI only now and then still refreshes its record.
constexpr uint32_t kCheckEvery = 256;

// The process's data-path lock for a snapshot: waited for, or only tried (false: another thread holds it).
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
    explicit operator bool() const noexcept { return !opal_using_threads() || held_ != nullptr; }

private:
    opal_recursive_mutex_t *held_ = nullptr;
};

std::unique_ptr<xrc::StatusWriter> writer;
std::mutex writer_mutex;
// A connection event since the last look (mca_btl_xrc_status_changed), taken in by the next one.
std::atomic<bool> change_pending{false};

// False when `wait` is false and another thread holds the data-path lock: nothing written, still due.
bool write(uint64_t now_us, bool wait) noexcept {
    const auto written = writer->write(now_us, [wait] { return DataLock(wait); });
    if (written == xrc::StatusWriter::Written::failed)
        BTL_XRC_VERBOSE(1, "btl:xrc: %s: no status record for xrc-status from now on: %s", opal_process_info.nodename,
                        writer->error().c_str());
    return written != xrc::StatusWriter::Written::busy;
}

// No record from now on: the file goes. The caller holds writer_mutex.
void release_writer() noexcept {
    mca_btl_xrc_component.status_countdown = UINT32_MAX;
    if (!writer) return;
    (void)unlink(writer->path().c_str());
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
        mca_btl_xrc_job_t &job = *mca_btl_xrc_component.job;
        const char *host = opal_process_info.nodename != nullptr ? opal_process_info.nodename : "";
        writer = std::make_unique<xrc::StatusWriter>(
            dir + "/" + xrc::status_file_name(job_name, job.my_rank),
            xrc::StatusWriter::this_process(job, host, static_cast<uint32_t>(interval)), uint64_t(interval) * 1000000u,
            xrc::StatusWriter::now_us(), [&job](uint32_t rank) {
                std::string name = job.hostname_of(rank);
                return name == "?" ? std::string() : name;
            });
        for (const auto &m : modules) writer->add({m->transport.get(), &m->counters, &m->finalizing});
        BTL_XRC_VERBOSE(10, "btl:xrc: status record %s", writer->path().c_str());
        (void)write(xrc::StatusWriter::now_us(), true);
        mca_btl_xrc_component.status_countdown = writer->failed() ? UINT32_MAX : kCheckEvery;
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
    if (!writer || writer->failed()) {
        mca_btl_xrc_component.status_countdown = UINT32_MAX;
        return;
    }
    // Reset before the event flag is taken: an event flagged after this sets the countdown to 1 again.
    mca_btl_xrc_component.status_countdown = kCheckEvery;
    if (change_pending.exchange(false, std::memory_order_relaxed)) writer->changed();
    const uint64_t now_us = xrc::StatusWriter::now_us();
    // A module busy in another thread: the next progress call tries again.
    if (writer->due(now_us) && !write(now_us, false))
        mca_btl_xrc_component.status_countdown.store(1, std::memory_order_relaxed);
}

void mca_btl_xrc_status_module_done(mca_btl_xrc_module_t *module) noexcept {
    const std::lock_guard<std::mutex> guard(writer_mutex);
    if (!writer) return;
    if (writer->remove(module->transport.get()) && !writer->failed()) {
        (void)write(xrc::StatusWriter::now_us(), true);
        return;
    }
    release_writer();
}

void mca_btl_xrc_status_fini() noexcept {
    const std::lock_guard<std::mutex> guard(writer_mutex);
    release_writer();
}
