// SPDX-License-Identifier: BSD-3-Clause
#include "xrc_domain.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace xrc {

Result<std::unique_ptr<XrcDomain>> XrcDomain::open(ibv_context *context, const std::string &dir, const std::string &job,
                                                   const std::string &device, int port, unsigned local_ranks) {
    std::unique_ptr<XrcDomain> domain(
        new XrcDomain(dir + "/btl_xrc_xrcd." + job + "." + device + "." + std::to_string(port), local_ranks));
    if (auto joined = domain->join(context); !joined) return std::move(joined).error();
    return domain;
}

XrcDomain::XrcDomain(std::string path, unsigned local_ranks)
    : path_(std::move(path)), local_ranks_(local_ranks == 0 ? 1 : local_ranks) {}

// What a domain file holder does, in order; the destructor undoes whatever of it was done.
Result<void> XrcDomain::join(ibv_context *context) {
    // O_NOFOLLOW: a link planted in a shared directory must not redirect us into someone else's domain.
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, S_IRUSR | S_IWUSR);
    if (fd_ < 0) {
        return Error::from_errno("cannot open the XRC domain file " + path_);
    }
    struct stat st{};
    if (::fstat(fd_, &st) == 0) {
        dev_ = st.st_dev;
        ino_ = st.st_ino;
    }
    ibv_xrcd_init_attr attr{};
    attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    attr.fd = fd_;
    attr.oflags = O_CREAT;
    xrcd_.reset(ibv_open_xrcd(context, &attr));
    if (!xrcd_) {
        return Error::from_errno("ibv_open_xrcd on " + path_ + " failed");
    }
    if (::flock(fd_, LOCK_SH) != 0) {
        return Error::from_errno("cannot lock the XRC domain file " + path_);
    }
    const char joined = 'j';
    if (::write(fd_, &joined, 1) != 1) {
        return Error::from_errno("cannot write the XRC domain file " + path_);
    }
    (void)everyone_joined();
    return {};
}

XrcDomain::~XrcDomain() {
    xrcd_.reset();
    if (fd_ < 0) return;
    // The last holder (nobody else has the shared lock) removes a file that not every local rank joined.
    if (!unlinked_ && ::flock(fd_, LOCK_UN) == 0 && ::flock(fd_, LOCK_EX | LOCK_NB) == 0) unlink_file();
    ::close(fd_);
}

bool XrcDomain::everyone_joined() noexcept {
    if (unlinked_) return true;
    struct stat st{};
    if (fd_ < 0 || ::fstat(fd_, &st) != 0) return false;
    if (static_cast<unsigned long long>(st.st_size) < local_ranks_) return false;
    unlink_file();
    return true;
}

void XrcDomain::unlink_file() noexcept {
    if (unlinked_) return;
    unlinked_ = true;
    (void)::unlink(path_.c_str());  // ENOENT: another local rank was first
}

}  // namespace xrc
