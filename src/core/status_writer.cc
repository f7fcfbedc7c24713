// SPDX-License-Identifier: BSD-3-Clause
#include "status_writer.h"

#include "process_identity.h"
#include "status_file.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>

namespace xrc {

namespace {

std::uint64_t clock_ns(clockid_t clock) noexcept {
    timespec ts{};
    clock_gettime(clock, &ts);
    return std::uint64_t(ts.tv_sec) * 1000000000u + std::uint64_t(ts.tv_nsec);
}

}  // namespace

std::uint64_t StatusWriter::now_us() noexcept {
    return clock_ns(CLOCK_MONOTONIC) / 1000;
}

std::uint64_t StatusWriter::thread_cpu_ns() noexcept {
    return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

StatusProcess StatusWriter::this_process(const JobShape &job, const std::string &host, std::uint32_t interval_s) {
    StatusProcess p;
    p.pid = static_cast<std::uint32_t>(getpid());
    p.start_ticks = process_start_ticks(getpid()).value_or(0);
    p.boot_id = kernel_boot_id();
    p.host = host;
    p.uid = static_cast<std::uint32_t>(getuid());
    p.jobid = job.jobid;
    p.rank = job.my_rank;
    p.local_rank = job.local_index;
    p.local_ranks = job.local_ranks;
    p.node = value_of(job.my_node_id);
    p.interval_s = interval_s;
    return p;
}

StatusWriter::StatusWriter(std::string path, StatusProcess process, std::uint64_t interval_us, std::uint64_t now_us,
                           HostOf host_of)
    : path_(std::move(path)),
      process_(std::move(process)),
      schedule_(interval_us, now_us),
      host_of_(std::move(host_of)) {
    hosts_.emplace(process_.node, process_.host);
}

bool StatusWriter::remove(const PortTransport *transport) noexcept {
    sources_.erase(std::remove_if(sources_.begin(), sources_.end(),
                                  [transport](const Source &s) { return s.transport == transport; }),
                   sources_.end());
    return !sources_.empty();
}

const std::string &StatusWriter::host_of(std::uint32_t node, std::uint32_t rank) {
    auto it = hosts_.find(node);
    if (it == hosts_.end()) it = hosts_.emplace(node, host_of_(rank)).first;
    return it->second;
}

StatusRecord StatusWriter::snapshot() {
    StatusRecord record;
    record.process = process_;
    const bool finalizing =
        std::any_of(sources_.begin(), sources_.end(), [](const Source &s) { return *s.finalizing; });
    record.process.state = finalizing ? "finalizing" : "running";
    record.process.sequence = ++process_.sequence;
    record.process.written_us = clock_ns(CLOCK_REALTIME) / 1000;
    for (const Source &source : sources_) {
        StatusPort &port = record.ports.emplace_back();
        source.transport->describe(port);
        for (StatusLink &link : port.links) link.host = host_of(link.node, link.owner);
        for (StatusTgt &tgt : port.tgts) tgt.sender_host = host_of(tgt.sender_node, tgt.sender);
        port.counters.reserve(std::size(kCounterInfo));
        for (const CounterInfo &info : kCounterInfo)
            port.counters.push_back({info.name, (*source.counters).*(info.field)});
    }
    return record;
}

void StatusWriter::store(const StatusRecord &record) {
    const auto written = replace_file(path_, encode_status(record));
    if (!written) error_ = written.error().message();
}

}  // namespace xrc
