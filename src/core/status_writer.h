// SPDX-License-Identifier: BSD-3-Clause
// This process's status record for xrc-status, kept up to date: one file per process next to the job's XRC domain
// file, holding what every port of the process holds and counts (status_record.h), rewritten when the schedule says
// (status_schedule.h: after connection events, every interval, within a CPU budget). A record that cannot be
// written stops the writing for good (failed()): the caller says so once and removes what is left.
//
// Size: one record per process, O(nodes contacted + TGT QPs made + handles held) lines; host names are looked up
// once per node contacted.
// Threads: the caller serializes every call (the BTL's writer mutex). What the ports show is read under the lock
// their data path is written under, which the caller takes for write() through `hold` (see there): lock order the
// caller's mutex, that lock, the connection manager's (describe() takes it).
#pragma once

#include "counters.h"
#include "params.h"
#include "port_transport.h"
#include "status_record.h"
#include "status_schedule.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace xrc {

class StatusWriter {
public:
    // One port as the record shows it: what its transport holds, what it counts, and whether it is finalizing.
    struct Source {
        const PortTransport *transport;
        const Counters *counters;
        const bool *finalizing;
    };
    // The host `rank` runs on, for the record's links and TGT QPs ("" when unknown).
    using HostOf = std::function<std::string(std::uint32_t rank)>;

    // The process as its record names it: pid, start time, boot id, uid read here, the rest from the job.
    static StatusProcess this_process(const JobShape &job, const std::string &host, std::uint32_t interval_s);

    // `path`: the record's file. `interval_us`: the refresh when nothing changes (0: on connection events only).
    StatusWriter(std::string path, StatusProcess process, std::uint64_t interval_us, std::uint64_t now_us,
                 HostOf host_of);

    const std::string &path() const noexcept { return path_; }
    void add(Source source) { sources_.push_back(source); }
    // The port goes (before its transport does): true while others are left.
    bool remove(const PortTransport *transport) noexcept;
    // A connection event happened since the last write.
    void changed() noexcept { schedule_.changed(); }
    bool due(std::uint64_t now_us) noexcept { return schedule_.due(now_us); }

    enum class Written : std::uint8_t { written, busy, failed };
    // Writes the record now. `hold()` takes the ports' data-path lock for the snapshot and returns its guard, false
    // when another thread holds it and the caller would not wait (nothing written: busy, still due). `failed`: the
    // record could not be written (error() says why) and none will be from now on.
    template <class Hold>
    Written write(std::uint64_t now_us, Hold hold) noexcept {
        const std::uint64_t cpu_ns = thread_cpu_ns();
        try {
            std::optional<StatusRecord> record;
            {
                const auto guard = hold();
                if (!guard) return Written::busy;
                record = snapshot();
            }
            store(*record);
        } catch (...) {
            error_ = "out of memory";
        }
        schedule_.wrote(now_us, thread_cpu_ns() - cpu_ns);
        return error_.empty() ? Written::written : Written::failed;
    }
    bool failed() const noexcept { return !error_.empty(); }
    const std::string &error() const noexcept { return error_; }

    // CLOCK_MONOTONIC in microseconds: the schedule's time.
    static std::uint64_t now_us() noexcept;

private:
    static std::uint64_t thread_cpu_ns() noexcept;
    StatusRecord snapshot();
    void store(const StatusRecord &record);
    const std::string &host_of(std::uint32_t node, std::uint32_t rank);

    std::string path_;
    StatusProcess process_;
    StatusSchedule schedule_;
    HostOf host_of_;
    std::vector<Source> sources_;                           // the live ports
    std::unordered_map<std::uint32_t, std::string> hosts_;  // by node id
    std::string error_;
};

}  // namespace xrc
