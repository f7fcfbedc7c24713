// The job's XRC domain on one device: every rank of the job on the node opens the same job-private file, so
// they share one XRCD (the kernel keys XRCDs by inode), and no other job or user can join it (mode 0600 in the
// job's own directory). After the modex fence every local rank has opened it, so the file can be unlinked: the
// XRCD lives on in the kernel, and nobody else can ever open it again.
#pragma once

#include "verbs_owners.h"

#include <string>

namespace xrc {

class XrcDomain {
public:
    // Opens (creating if needed) <dir>/btl_xrc_xrcd.<job>.<device> and the XRCD on it. `job` names the job
    // (and user) so that even a shared directory (btl_xrc_xrcd_dir) never puts two jobs in one domain.
    XrcDomain(ibv_context *context, const std::string &dir, const std::string &job, const std::string &device,
              std::string &error);
    XrcDomain(const XrcDomain &) = delete;
    XrcDomain &operator=(const XrcDomain &) = delete;
    ~XrcDomain() = default;

    ibv_xrcd *get() const noexcept { return xrcd_.get(); }
    const std::string &path() const noexcept { return path_; }
    // Removes the file; the domain itself stays for everyone who opened it. Idempotent.
    void unlink_file() noexcept;

private:
    std::string path_;
    XrcdPtr xrcd_;
    bool unlinked_ = false;
};

}  // namespace xrc
