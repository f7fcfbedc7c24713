// SPDX-License-Identifier: BSD-3-Clause
#include "status_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

namespace xrc {
namespace {

// The temporary file of `path`: hidden, in the same directory (rename stays within one file system).
std::string temporary_of(const std::string &path) {
    const std::size_t slash = path.rfind('/');
    const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
    return path.substr(0, base) + "." + path.substr(base) + ".tmp";
}

}  // namespace

std::string status_file_name(const std::string &job, std::uint32_t rank) {
    return kStatusFilePrefix + job + "." + std::to_string(rank);
}

bool is_status_file_name(std::string_view name) {
    const std::string_view prefix = kStatusFilePrefix;
    return name.size() > prefix.size() && name.substr(0, prefix.size()) == prefix &&
           name.find('/') == std::string_view::npos;
}

Result<void> replace_file(const std::string &path, std::string_view bytes) {
    const std::string tmp = temporary_of(path);
    // O_NOFOLLOW: a link planted in a shared directory must not redirect the write elsewhere.
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, S_IRUSR | S_IWUSR);
    if (fd < 0) return Error::from_errno("cannot create " + tmp);
    std::optional<Error> error;
    for (std::size_t done = 0; done < bytes.size() && !error;) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            error = Error::from_errno("cannot write " + tmp);
        else done += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0 && !error) error = Error::from_errno("cannot write " + tmp);
    if (!error && ::rename(tmp.c_str(), path.c_str()) != 0) error = Error::from_errno("cannot rename " + tmp);
    if (!error) return {};
    (void)::unlink(tmp.c_str());
    return std::move(*error);
}

Result<std::string> read_regular_file(const std::string &path, std::size_t max) {
    // O_NONBLOCK: a FIFO planted under the name must not block the reader (it is refused below).
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        if (e == ELOOP) return malformed("a symbolic link, not a record");
        return Error(e == ENOENT ? ErrorKind::gone : ErrorKind::system, std::strerror(e), e);
    }
    std::optional<Error> error;
    std::string bytes;
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
        error = Error(ErrorKind::system, std::strerror(errno), errno);
    } else if (!S_ISREG(st.st_mode)) {
        error = malformed("not a regular file");
    } else if (static_cast<std::uint64_t>(st.st_size) > max) {
        error = Error(ErrorKind::resource, "too large for a record (" + std::to_string(st.st_size) + " bytes)");
    } else {
        bytes.resize(static_cast<std::size_t>(st.st_size) + 1);  // one more: a file that grew is noticed
        std::size_t done = 0;
        while (done < bytes.size()) {
            const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                error = Error(ErrorKind::system, std::strerror(errno), errno);
                break;
            }
            if (n == 0) break;
            done += static_cast<std::size_t>(n);
        }
        bytes.resize(done);
        if (!error && done > max) error = Error(ErrorKind::resource, "too large for a record");
    }
    ::close(fd);
    if (error) return std::move(*error);
    return bytes;
}

}  // namespace xrc
