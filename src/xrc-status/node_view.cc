// SPDX-License-Identifier: BSD-3-Clause
#include "node_view.h"

#include "src/core/process_identity.h"
#include "src/core/status_file.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace xrc_status {
namespace {

std::string dir_of(const std::string &path) {
    const std::size_t slash = path.rfind('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}

// Builds the domains of a job from its live processes.
void merge_domains(JobView &job) {
    using Key = std::tuple<std::string, std::uint32_t, std::uint64_t, std::uint64_t>;
    struct Building {
        DomainView view;
        std::map<std::uint32_t, TgtView> tgts;  // by QPN
        std::map<std::uint32_t, std::vector<std::pair<std::uint32_t, std::uint32_t>>> handles;  // QPN -> (rank, pid)
        std::map<std::uint32_t, std::uint32_t> handle_ini;  // QPN -> the INI QP a holder saw
    };
    std::map<Key, Building> domains;
    for (const ProcessView &p : job.processes) {
        if (p.liveness != Liveness::alive) continue;
        const std::uint32_t rank = p.record.process.rank, pid = p.record.process.pid;
        for (const xrc::StatusPort &port : p.record.ports) {
            Building &b = domains[{port.device, port.port, port.xrcd_dev, port.xrcd_ino}];
            DomainView &d = b.view;
            d.device = port.device;
            d.port = port.port;
            d.xrcd_dev = port.xrcd_dev;
            d.xrcd_ino = port.xrcd_ino;
            if (d.file.empty()) d.file = port.xrcd_file;
            d.ranks.push_back(rank);
            d.cms.push_back({rank, pid, port.cm_qpn});
            for (const xrc::StatusSrq &s : port.srqs) d.srqs.push_back({rank, pid, s});
            for (const xrc::StatusLink &l : port.links) (l.ini_qpn != 0 ? d.inis : d.idle_links).push_back({rank, pid, l});
            for (const xrc::StatusTgt &t : port.tgts) {
                TgtView &v = b.tgts[t.qpn];
                v.tgt = t;
                v.owner_known = true;
                v.owner = rank;
                v.owner_pid = pid;
            }
            for (const xrc::StatusHandle &h : port.handles) {
                b.handles[h.qpn].emplace_back(rank, pid);
                b.handle_ini[h.qpn] = h.ini_qpn;
            }
        }
    }
    for (auto &[key, b] : domains) {
        for (auto &[qpn, holders] : b.handles) {
            TgtView &v = b.tgts[qpn];
            if (!v.owner_known) {
                v.tgt.qpn = qpn;
                v.tgt.ini_qpn = b.handle_ini[qpn];
            }
        }
        for (auto &[qpn, v] : b.tgts) {
            std::vector<std::pair<std::uint32_t, std::uint32_t>> holders;
            if (v.owner_known) holders.emplace_back(v.owner, v.owner_pid);
            if (auto it = b.handles.find(qpn); it != b.handles.end())
                holders.insert(holders.end(), it->second.begin(), it->second.end());
            std::sort(holders.begin(), holders.end());
            holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
            for (const auto &[rank, pid] : holders) {
                v.holders.push_back(rank);
                v.holder_pids.push_back(pid);
            }
            b.view.tgts.push_back(std::move(v));
        }
        DomainView &d = b.view;
        std::sort(d.ranks.begin(), d.ranks.end());
        auto by_rank_qpn = [](const IniView &x, const IniView &y) {
            return std::tie(x.rank, x.link.ini_qpn, x.link.node) < std::tie(y.rank, y.link.ini_qpn, y.link.node);
        };
        std::sort(d.inis.begin(), d.inis.end(), by_rank_qpn);
        std::sort(d.idle_links.begin(), d.idle_links.end(), by_rank_qpn);
        std::sort(d.srqs.begin(), d.srqs.end(), [](const SrqView &x, const SrqView &y) {
            return std::tie(x.rank, x.srq.srq_num) < std::tie(y.rank, y.srq.srq_num);
        });
        std::sort(d.cms.begin(), d.cms.end(), [](const CmView &x, const CmView &y) { return x.rank < y.rank; });
        job.domains.push_back(std::move(d));
    }
}

}  // namespace

const char *liveness_name(Liveness l) {
    switch (l) {
    case Liveness::alive: return "alive";
    case Liveness::gone: return "stale: the process is gone";
    case Liveness::reused: return "stale: the process is gone (its pid is another process now)";
    case Liveness::rebooted: return "stale: written before the node rebooted";
    case Liveness::other_host: return "another host's (not checked from here)";
    }
    return "?";
}

bool is_stale(Liveness l) { return l == Liveness::gone || l == Liveness::reused || l == Liveness::rebooted; }

bool NodeView::any_stale() const {
    for (const JobView &j : jobs)
        for (const ProcessView &p : j.processes)
            if (is_stale(p.liveness)) return true;
    return false;
}

bool same_host(const std::string &a, const std::string &b) {
    return a.substr(0, a.find('.')) == b.substr(0, b.find('.'));
}

Liveness live_process(const xrc::StatusProcess &p, const std::string &host, const std::string &boot_id) {
    if (!same_host(p.host, host)) return Liveness::other_host;
    if (!p.boot_id.empty() && !boot_id.empty() && p.boot_id != boot_id) return Liveness::rebooted;
    const auto start = xrc::process_start_ticks(static_cast<pid_t>(p.pid));
    if (!start) return Liveness::gone;
    if (p.start_ticks != 0 && *start != p.start_ticks) return Liveness::reused;
    return Liveness::alive;
}

NodeView merge_records(const std::vector<std::pair<std::string, std::string>> &records, const Environment &env) {
    NodeView view;
    view.host = env.host;
    std::map<std::tuple<std::string, std::uint32_t, std::uint32_t>, JobView> jobs;  // (dir, uid, jobid)
    for (const auto &[path, bytes] : records) {
        ProcessView p;
        p.path = path;
        auto record = xrc::decode_status(bytes);
        if (!record) {
            view.problems.push_back({path, record.error().message()});
            continue;
        }
        p.record = std::move(*record);
        const xrc::StatusProcess &proc = p.record.process;
        p.liveness = env.liveness ? env.liveness(proc) : live_process(proc, env.host, env.boot_id);
        p.age_s = env.now_us > proc.written_us ? double(env.now_us - proc.written_us) / 1e6 : 0.0;
        for (const xrc::StatusPort &port : p.record.ports) {
            for (const xrc::StatusLink &l : port.links) p.ini_qps += l.ini_qpn != 0;
            p.tgt_qps += port.tgts.size();
            p.handles += port.handles.size();
        }
        JobView &job = jobs[{dir_of(path), proc.uid, proc.jobid}];
        job.dir = dir_of(path);
        job.uid = proc.uid;
        job.jobid = proc.jobid;
        job.processes.push_back(std::move(p));
    }
    for (auto &[key, job] : jobs) {
        std::sort(job.processes.begin(), job.processes.end(), [](const ProcessView &a, const ProcessView &b) {
            return std::tie(a.record.process.rank, a.path) < std::tie(b.record.process.rank, b.path);
        });
        merge_domains(job);
        view.jobs.push_back(std::move(job));
    }
    return view;
}

NodeView build_node_view(const std::vector<std::string> &files,
                         const std::vector<std::pair<std::string, std::string>> &unreadable, const Environment &env) {
    std::vector<std::pair<std::string, std::string>> records;
    std::vector<Problem> problems;
    for (const std::string &path : files) {
        auto bytes = xrc::read_regular_file(path, xrc::kMaxStatusFileBytes);
        if (!bytes) {
            if (bytes.error().kind() == xrc::ErrorKind::gone) continue;  // its process finished while we looked
            problems.push_back({path, bytes.error().message()});
            continue;
        }
        records.emplace_back(path, std::move(*bytes));
    }
    NodeView view = merge_records(records, env);
    view.problems.insert(view.problems.begin(), problems.begin(), problems.end());
    for (const auto &[dir, why] : unreadable) view.problems.push_back({dir, "cannot list this directory: " + why});
    return view;
}

}  // namespace xrc_status
