// SPDX-License-Identifier: BSD-3-Clause
// Connections to the processes of other jobs (MPI_Comm_spawn, MPI_Comm_connect/accept): one ConnectionManager per
// job met, beside the manager of this process's own job, all on the port's one UD QP.
//
// Why one per job: an XRC sender's INI QP targets a TGT QP in the *receiver's* XRC domain and names SRQs of that
// domain, and each job has its own domain on a node (a job-private file, xrc_domain.h). So a sender needs one INI
// QP per (remote node, remote job), and the receiving side makes TGT QPs for another job's senders in its own
// domain as it does for its own job's. A manager keeps its links by node port and its peers by rank: both are
// only unique within one job, so each job met gets a manager of its own, whose datagrams name that job.
//
// Dispatch: a datagram's job field is the sender's job. Our own job's go to the home manager; a job met (meet())
// gets its manager; a job never met creates nothing: the datagram is counted as rejected and dropped (forged or
// stale data never makes a manager, a QP or a handle).
//
// Lifetime: retire() takes a job's manager out of dispatch for new work when the job's last process left this
// process (del_procs): its links drain and close like at finalize, the TGT QPs it made for that job's senders stay
// until each sender closed them (or, past the leaving wait, was told and answered, or was dropped), and then the
// manager goes with its QPs. A job that vanished without closing does not hold it for longer than the connect
// timeout.
//
// Handles: a first message through a TGT QP does not say which job sent it, so every handle is held by the home
// manager (ConnectionManager::keep_handles_in); a CLOSE that another job's manager receives releases it there.
//
// Threads: the set of managers is guarded by its own mutex (taken before any manager's, never under one). The
// serving thread dispatches datagrams and timers; progress meets, retires and ticks.
#pragma once

#include "connection_manager.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace xrc {

class JobManagers {
public:
    // `home`: the manager of this process's own job (it outlives this object).
    explicit JobManagers(ConnectionManager &home) noexcept : home_(home) {}
    JobManagers(const JobManagers &) = delete;
    JobManagers &operator=(const JobManagers &) = delete;
    ~JobManagers();

    ConnectionManager &home() noexcept { return home_; }
    // The manager of job `jobid` (not ours), made now with `host` if the job was not met yet (or was retired: a
    // new manager then, the retiring one finishes on its own). `host` answers for that job's ranks (address_of).
    // It counts nowhere until its count_into() names the counters (the owner's: totals over every job).
    ConnectionManager &meet(std::uint32_t jobid, std::unique_ptr<CmHost> host, CmConfig config);
    // The manager of a job met and not retired, or null.
    ConnectionManager *find(std::uint32_t jobid) const noexcept;
    // To the manager of the datagram's job; a malformed one goes to the home manager (which counts and drops it),
    // one of a job never met is counted in `rejected` and dropped. True when a manager took it.
    bool on_datagram(std::span<const std::uint8_t> bytes, std::uint16_t slid, std::uint32_t src_qp) noexcept;
    // The job's processes are gone from this process: its links drain and close, the manager goes once nothing of
    // it is left (tick()).
    void retire(std::uint32_t jobid) noexcept;
    // This process is in its finalize: the senders of every other job still holding TGT QPs we made for them are
    // told LEAVING now (ConnectionManager::leave_initiators), not after finalize's peer wait as our own job's are.
    // Our own job's senders reach their finalize with us and close; another job's (the parents of a spawned
    // child, a job met through MPI_Comm_connect) usually go on, and Open MPI never calls del_procs at
    // MPI_Comm_disconnect, so nothing would make them close before the wait ran out. Returns what
    // leave_initiators() says, per job ("job J ...", "; "-separated), empty when no other job holds one.
    std::string leave_initiators() noexcept;
    // What `of` says for each manager, retiring ones included, prefixed "job J " and joined by "; " (empty when
    // every one said nothing). Called without our mutex held: each manager takes its own.
    std::string joined(std::string (ConnectionManager::*of)() noexcept) noexcept;
    // Every manager but the home one: timers, drains, retired managers finished or past their bounds released.
    void tick(std::uint64_t now_us) noexcept;
    std::uint64_t tick_timers() noexcept;
    // Managers of other jobs, retiring ones included.
    std::size_t size() const noexcept;
    bool empty() const noexcept { return size() == 0; }
    // Whether any manager of another job wants tick(): one relaxed load (progress asks on every call).
    bool busy() const noexcept { return due_.load(std::memory_order_relaxed); }
    // f(jobid, manager, retiring) for each manager of another job (under the set's mutex: f must not call this).
    template <class F>
    void for_each(F &&f) const {
        std::lock_guard<std::mutex> g(mutex_);
        for (const auto &e : entries_) f(e->jobid, *e->cm, e->retiring);
    }

private:
    struct Entry {
        std::uint32_t jobid = 0;
        std::unique_ptr<CmHost> host;
        std::unique_ptr<ConnectionManager> cm;  // destroyed before `host`
        bool retiring = false;
        bool told_leaving = false;
        std::uint64_t retired_at_us = 0;
        ~Entry() { cm.reset(); }
    };
    std::vector<std::shared_ptr<Entry>> snapshot() const;

    ConnectionManager &home_;
    std::atomic<bool> due_{false};  // raised by every manager that wants tick(), recomputed by tick()
    mutable std::mutex mutex_;
    std::vector<std::shared_ptr<Entry>> entries_;
};

}  // namespace xrc
