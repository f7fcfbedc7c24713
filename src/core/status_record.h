// SPDX-License-Identifier: BSD-3-Clause
// A process's status record: what one btl xrc process holds on its node, per port: the job's XRC domain, the
// process's SRQs, its connection manager's UD QP, its INI QPs (one per remote node it talks to), the TGT QPs it made
// for remote senders, the handles it opened on TGT QPs other local ranks made, and its counters. The BTL writes it
// into the job's session directory (status_file.h) on connection events and at intervals; xrc-status reads a
// node's records and merges them into one view per job and XRC domain. It is the BTL's own view, so it means the
// same on a real HCA as on the software one.
//
// Format, version 1: text, one item per line, `KIND key=value ...`, values percent-encoded (status_escape); first
// line `btl-xrc-status 1`, last line `end N` with N the number of lines before it, so that a cut file is told from
// a whole one. Readers skip kinds and keys they do not know (later additions keep version 1) and refuse another
// version. Every field is checked when read: a malformed or foreign file gets a reason, never a crash.
//
// Size per process: O(ports * (receive classes + nodes contacted + TGT QPs made + handles held)) lines of about 100
// bytes. Handles grow with the remote processes this one received from: at most P*(N-1).
#pragma once

#include "result.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xrc {

inline constexpr const char *kStatusMagic = "btl-xrc-status";
inline constexpr unsigned kStatusVersion = 1;

struct StatusSrq {
    std::uint32_t buffer_size = 0;  // the receive class
    std::uint32_t srq_num = 0;
    std::uint32_t count = 0;   // buffers of the class
    std::uint32_t posted = 0;  // posted and not seen consumed (a completion not polled yet counts as posted)
    std::uint32_t limit = 0;   // the SRQ limit (low watermark) the BTL arms; 0: none
    bool operator==(const StatusSrq &) const = default;
};

// The send side toward one node: an INI QP (0 when the link has none now) and where it goes.
struct StatusLink {
    std::uint32_t node = 0;  // the launcher's id of the remote node
    std::string host;        // its host name ("" when unknown)
    std::string state;       // idle, waiting, connecting, connected, draining, failed; loopback
    std::uint32_t ini_qpn = 0;
    std::string qp_state;       // INIT, RTS, ERR, or "" without a QP (as the BTL drove it)
    std::uint32_t owner = 0;    // the rank of that node the connection goes through (it made the TGT QP)
    std::uint32_t tgt_qpn = 0;  // 0 until that rank accepted
    std::uint32_t generation = 0;
    std::uint32_t job = 0;          // the job of the node's processes it reaches: this process's, or another
                                    // (MPI_Comm_spawn, connect/accept) with btl_xrc_other_jobs
    std::uint32_t outstanding = 0;  // work requests posted and not yet retired
    bool queued = false;            // sends wait for the connection (or for credit)
    bool operator==(const StatusLink &) const = default;
};

// A TGT QP this process made (it is its owner) for a remote sender's INI QP, or its loopback TGT QP.
struct StatusTgt {
    std::uint32_t qpn = 0;
    std::string state;              // as the BTL drove it: RTS
    std::uint32_t sender = 0;       // the rank whose INI QP sends through it
    std::uint32_t sender_node = 0;  // that rank's node
    std::string sender_host;        // "" when unknown
    std::uint32_t ini_qpn = 0;      // the sender's INI QP
    std::uint32_t generation = 0;   // of the sender's connection
    std::uint32_t sender_job = 0;   // the sender's job: this process's, or another (btl_xrc_other_jobs)
    bool loopback = false;          // this process's own on-node pair
    bool operator==(const StatusTgt &) const = default;
};

// One of the process's counters (counters.h) on this port.
struct StatusCounter {
    std::string name;
    std::uint64_t value = 0;
    bool operator==(const StatusCounter &) const = default;
};

// A handle this process holds on a TGT QP another local rank made.
struct StatusHandle {
    std::uint32_t qpn = 0;
    std::uint32_t ini_qpn = 0;  // the remote INI QP it is connected to
    bool operator==(const StatusHandle &) const = default;
};

struct StatusPort {
    std::string device;
    std::uint32_t port = 0;
    std::uint32_t lid = 0;
    std::string xrcd_file;                     // the XRC domain's file (unlinked once every local rank joined)
    std::uint64_t xrcd_dev = 0, xrcd_ino = 0;  // its identity: the kernel keys XRC domains by inode
    std::uint32_t cm_qpn = 0;                  // the connection manager's UD QP
    std::vector<StatusSrq> srqs;
    std::vector<StatusLink> links;
    std::vector<StatusTgt> tgts;
    std::vector<StatusHandle> handles;
    std::vector<StatusCounter> counters;
    bool operator==(const StatusPort &) const = default;
};

struct StatusProcess {
    std::uint32_t pid = 0;
    std::uint64_t start_ticks = 0;  // the process's start (/proc/PID/stat), to tell a reused pid
    std::string boot_id;            // the kernel's boot id, to tell a record from before a reboot
    std::string host;
    std::uint32_t uid = 0;
    std::uint32_t jobid = 0;
    std::uint32_t rank = 0;
    std::uint32_t local_rank = 0;
    std::uint32_t local_ranks = 0;
    std::uint32_t node = 0;
    std::string state;             // running, finalizing
    std::uint64_t sequence = 0;    // writes so far (the first is 1)
    std::uint64_t written_us = 0;  // wall clock of this write (microseconds since the epoch)
    std::uint32_t interval_s = 0;  // refresh interval when nothing changes (0: only on connection events)
    bool operator==(const StatusProcess &) const = default;
};

struct StatusRecord {
    StatusProcess process;
    std::vector<StatusPort> ports;
    bool operator==(const StatusRecord &) const = default;
};

std::string encode_status(const StatusRecord &record);
// The record, or why `bytes` is not a status record (ErrorKind::malformed, with the line it failed at).
Result<StatusRecord> decode_status(std::string_view bytes);

// Values in the record: printable ASCII except space, '%' and '=' as they are, other bytes as %XX.
std::string status_escape(std::string_view value);
bool status_unescape(std::string_view text, std::string &value);

}  // namespace xrc
