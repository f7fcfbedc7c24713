// The job's XRC domain on one device port: every rank of the job on the node opens the same job-private file, so
// they share one XRCD (the kernel keys XRCDs by inode), and no other job or user can join it (mode 0600 in the
// job's own directory).
//
// The file also tells the node's ranks about each other, without trusting the launcher's barriers:
//   joined: each rank appends one byte once it holds the XRCD. When the file holds one byte per local rank,
//     every local rank has the domain and the file is unlinked (the XRCD lives on in the kernel, and nobody else
//     can ever open it). If some local ranks never join (they use another device), the last rank to leave
//     unlinks it instead.
//   leaving: each rank holds a shared lock on the file while it may still receive. A rank that finalizes drops
//     its shared lock and may destroy the TGT QPs it created only once it can take the lock exclusively, that
//     is once every other rank of the node that joined has stopped receiving too (or died: the kernel drops
//     a dead process's locks). So a TGT QP never goes while another local rank may still receive through it.
#pragma once

#include "verbs_owners.h"

#include <string>

namespace xrc {

class XrcDomain {
public:
    // Opens (creating if needed) <dir>/btl_xrc_xrcd.<job>.<device>.<port> and the XRCD on it, and joins: appends
    // this rank's byte and takes the shared lock. `job` names the job (and user) so that even a shared directory
    // (btl_xrc_xrcd_dir) never puts two jobs in one domain; `local_ranks` is the job's rank count on this node.
    XrcDomain(ibv_context *context, const std::string &dir, const std::string &job, const std::string &device,
              int port, unsigned local_ranks, std::string &error);
    XrcDomain(const XrcDomain &) = delete;
    XrcDomain &operator=(const XrcDomain &) = delete;
    ~XrcDomain();

    ibv_xrcd *get() const noexcept { return xrcd_.get(); }
    const std::string &path() const noexcept { return path_; }
    // Every local rank has joined (then the file is gone already).
    bool everyone_joined() noexcept;
    // This rank stops receiving. True once every other rank that joined has stopped too (call it again until
    // then); the file is unlinked at the latest then.
    bool leave() noexcept;

private:
    void unlink_file() noexcept;

    std::string path_;
    XrcdPtr xrcd_;
    int fd_ = -1;
    unsigned local_ranks_ = 1;
    bool unlinked_ = false;
    bool left_ = false;
};

}  // namespace xrc
