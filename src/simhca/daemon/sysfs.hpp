// SPDX-License-Identifier: BSD-3-Clause
// The device as the file system shows it: a sysfs-like directory (ibdev_path points at it) with the files hwloc
// and the rdma tools read, and, on request, its uverbs character device.
#pragma once
#include <cstdint>
#include <string>

namespace simhca {

// Creates/refreshes the files; returns false with `err` set on failure.
bool write_sysfs(const std::string &dir, uint16_t lid, std::string &err);

// Port counters as the kernel shows a real HCA's (ports/1/hw_counters/NAME, mlx5's names), so that tools and
// tests read them where they would on hardware. The daemon keeps them in memory and rewrites a file whenever
// its counter changes: each counts a rare event (an ACK timeout costs the requester a timeout), never a packet.
struct PortCounters {
    // The requester's ACK timer ran out (its request or the answer was lost, or the responder's QP was not
    // ready to receive) and it retransmits. Not counted: the last expiry, which ends the WR with RETRY_EXC_ERR.
    uint64_t local_ack_timeout_err = 0;
};
// Every counter by its sysfs name, for the files and for the status listing.
inline constexpr struct {
    const char *name;
    uint64_t PortCounters::*field;
} kPortCounters[] = {{"local_ack_timeout_err", &PortCounters::local_ack_timeout_err}};

// Writes each counter's file (atomically: a reader sees the old or the new value); false on failure.
bool write_port_counters(const std::string &dir, const PortCounters &counters);

// DIR/uverbs0 (DIR is /dev/infiniband on a node of its own), a character device with the kernel's numbers for
// the first uverbs device, mode 0666 as rdma-core's udev rules make it, for as long as this object lives.
// Programs find RDMA devices by that file: rdma-core lists only devices whose file exists, UCX takes only
// devices whose file is a character device it may read and write. Nothing opens it: the library reaches
// the daemon through its socket (opening it gives ENXIO, as a uverbs file without its device does).
class UverbsFile {
public:
    UverbsFile() = default;
    UverbsFile(const UverbsFile &) = delete;
    UverbsFile &operator=(const UverbsFile &) = delete;
    ~UverbsFile();
    // Creates DIR (and its parents) and the file, replacing a stale one; false with `err` set on failure.
    bool create(const std::string &dir, std::string &err);

private:
    std::string path_;
};

} // namespace simhca
