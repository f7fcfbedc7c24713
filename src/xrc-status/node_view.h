// SPDX-License-Identifier: BSD-3-Clause
// One node's view, merged from the status records of its btl xrc processes: per job (a directory of records), its
// processes and, per XRC domain (device, port, and the domain file's inode: the kernel's identity of the domain),
// the TGT QPs with their owner and every local rank holding a handle, the INI QPs, the SRQs and the connection
// managers' UD QPs. A process whose pid is gone (or was reused, or belongs to an earlier boot) is stale: it is
// listed, its objects are not (the kernel released them with it). A process of another host (a shared
// btl_xrc_xrcd_dir) cannot be checked from here: listed, not merged. A file that is not a valid record is a
// problem, reported with its reason.
#pragma once

#include "src/core/status_record.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace xrc_status {

enum class Liveness { alive, gone, reused, rebooted, other_host };
const char *liveness_name(Liveness l);
bool is_stale(Liveness l);

struct ProcessView {
    std::string path;
    xrc::StatusRecord record;
    Liveness liveness = Liveness::alive;
    double age_s = 0;  // since the record was written
    std::size_t ini_qps = 0, tgt_qps = 0, handles = 0;  // what the record holds
};

struct TgtView {
    xrc::StatusTgt tgt;        // as its owner describes it (only qpn when the owner has no record here)
    bool owner_known = false;  // a live record of this domain made it
    std::uint32_t owner = 0, owner_pid = 0;
    std::vector<std::uint32_t> holders, holder_pids;  // the owner and every rank with a handle, by rank
};

struct IniView {
    std::uint32_t rank = 0, pid = 0;
    xrc::StatusLink link;
};

struct SrqView {
    std::uint32_t rank = 0, pid = 0;
    xrc::StatusSrq srq;
};

struct CmView {
    std::uint32_t rank = 0, pid = 0, qpn = 0;
};

struct DomainView {
    std::string device;
    std::uint32_t port = 0;
    std::uint64_t xrcd_dev = 0, xrcd_ino = 0;
    std::string file;
    std::vector<std::uint32_t> ranks;  // the live processes in it
    std::vector<TgtView> tgts;         // by QPN
    std::vector<IniView> inis;         // with a QP, by rank then QPN
    std::vector<IniView> idle_links;   // without one (idle, waiting, failed)
    std::vector<SrqView> srqs;
    std::vector<CmView> cms;
};

struct JobView {
    std::string dir;
    std::uint32_t jobid = 0, uid = 0;
    std::vector<ProcessView> processes;  // by rank
    std::vector<DomainView> domains;
};

struct Problem {
    std::string path, error;
};

struct NodeView {
    std::string host;
    std::vector<JobView> jobs;
    std::vector<Problem> problems;  // records that could not be read, directories that could not be listed
    bool any_stale() const;
};

// What the merge needs from the system, so that it can be tested without one.
struct Environment {
    std::string host;     // this node's host name
    std::string boot_id;  // this kernel's
    std::uint64_t now_us = 0;  // wall clock
    std::function<Liveness(const xrc::StatusProcess &)> liveness;  // null: looked up in /proc (live_process)
};

// Reads and merges `files`; `unreadable` are directories the search could not list (and why).
NodeView build_node_view(const std::vector<std::string> &files,
                         const std::vector<std::pair<std::string, std::string>> &unreadable, const Environment &env);
// Merges records already read (path, bytes).
NodeView merge_records(const std::vector<std::pair<std::string, std::string>> &records, const Environment &env);

// Whether the process of `p` still runs here, from /proc.
Liveness live_process(const xrc::StatusProcess &p, const std::string &host, const std::string &boot_id);
// Host names are compared without their domain part (launchers keep either).
bool same_host(const std::string &a, const std::string &b);

}  // namespace xrc_status
