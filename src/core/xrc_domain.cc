#include "xrc_domain.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace xrc {

XrcDomain::XrcDomain(ibv_context *context, const std::string &dir, const std::string &job, const std::string &device,
                     std::string &error)
    : path_(dir + "/btl_xrc_xrcd." + job + "." + device) {
    // O_NOFOLLOW: a link planted in a shared directory must not redirect us into someone else's domain.
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, S_IRUSR | S_IWUSR);
    if (fd < 0) {
        error = "cannot open the XRC domain file " + path_ + ": " + std::strerror(errno);
        return;
    }
    ibv_xrcd_init_attr attr{};
    attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    attr.fd = fd;
    attr.oflags = O_CREAT;
    xrcd_.reset(ibv_open_xrcd(context, &attr));
    const int saved = errno;
    ::close(fd);  // the XRCD holds the inode; the descriptor is not needed any more
    if (!xrcd_) error = "ibv_open_xrcd on " + path_ + " failed: " + std::strerror(saved);
}

void XrcDomain::unlink_file() noexcept {
    if (unlinked_) return;
    unlinked_ = true;
    (void)::unlink(path_.c_str());  // ENOENT: another local rank was first
}

}  // namespace xrc
