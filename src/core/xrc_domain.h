// SPDX-License-Identifier: BSD-3-Clause
// The job's XRC domain on one device port: every rank of the job on the node opens the same job-private file, so
// they share one XRCD (the kernel keys XRCDs by inode), and no other job or user can join it (mode 0600 in the
// job's own directory).
//
// The file also counts the node's ranks, without trusting the launcher's barriers: each rank appends one byte
// once it holds the XRCD. When the file holds one byte per local rank, every local rank has the domain and the
// file is unlinked (the XRCD lives on in the kernel, and nobody else can ever open it). If some local ranks never
// join (they use another device), the last rank to close it unlinks it (every holder keeps a shared lock on it).
#pragma once

#include "result.h"
#include "verbs_owners.h"

#include <cstdint>
#include <memory>
#include <string>

namespace xrc {

class XrcDomain {
public:
    // Opens (creating if needed) <dir>/btl_xrc_xrcd.<job>.<device>.<port> and the XRCD on it, and joins: takes
    // the shared lock and appends this rank's byte. `job` names the job (and user) so that even a shared directory
    // (btl_xrc_xrcd_dir) never puts two jobs in one domain; `local_ranks` is the job's rank count on this node.
    static Result<std::unique_ptr<XrcDomain>> open(ibv_context *context, const std::string &dir, const std::string &job,
                                                   const std::string &device, int port, unsigned local_ranks);
    XrcDomain(const XrcDomain &) = delete;
    XrcDomain &operator=(const XrcDomain &) = delete;
    ~XrcDomain();

    ibv_xrcd *get() const noexcept { return xrcd_.get(); }
    const std::string &path() const noexcept { return path_; }
    // The domain file's identity (the kernel keys XRC domains by it), for status listings.
    std::uint64_t file_dev() const noexcept { return dev_; }
    std::uint64_t file_ino() const noexcept { return ino_; }
    // Every local rank has joined (then the file is gone already).
    bool everyone_joined() noexcept;

private:
    XrcDomain(std::string path, unsigned local_ranks);
    Result<void> join(ibv_context *context);
    void unlink_file() noexcept;

    std::string path_;
    XrcdPtr xrcd_;
    int fd_ = -1;
    unsigned local_ranks_ = 1;
    std::uint64_t dev_ = 0, ino_ = 0;
    bool unlinked_ = false;
};

}  // namespace xrc
