// SPDX-License-Identifier: BSD-3-Clause
#include "status_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace xrc {
namespace {

std::string errno_text(const std::string &what) { return what + ": " + std::strerror(errno); }

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

std::string replace_file(const std::string &path, std::string_view bytes) {
    const std::string tmp = temporary_of(path);
    // O_NOFOLLOW: a link planted in a shared directory must not redirect the write elsewhere.
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, S_IRUSR | S_IWUSR);
    if (fd < 0) return errno_text("cannot create " + tmp);
    std::string error;
    for (std::size_t done = 0; done < bytes.size() && error.empty();) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) error = errno_text("cannot write " + tmp);
        else done += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0 && error.empty()) error = errno_text("cannot write " + tmp);
    if (error.empty() && ::rename(tmp.c_str(), path.c_str()) != 0) error = errno_text("cannot rename " + tmp);
    if (!error.empty()) (void)::unlink(tmp.c_str());
    return error;
}

std::string read_regular_file(const std::string &path, std::size_t max, std::string &bytes, bool *missing) {
    bytes.clear();
    if (missing != nullptr) *missing = false;
    // O_NONBLOCK: a FIFO planted under the name must not block the reader (it is refused below).
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (missing != nullptr) *missing = errno == ENOENT;
        return errno == ELOOP ? "a symbolic link, not a record" : std::strerror(errno);
    }
    std::string error;
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
        error = std::strerror(errno);
    } else if (!S_ISREG(st.st_mode)) {
        error = "not a regular file";
    } else if (static_cast<std::uint64_t>(st.st_size) > max) {
        error = "too large for a record (" + std::to_string(st.st_size) + " bytes)";
    } else {
        bytes.resize(static_cast<std::size_t>(st.st_size) + 1);  // one more: a file that grew is noticed
        std::size_t done = 0;
        while (done < bytes.size()) {
            const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                error = std::strerror(errno);
                break;
            }
            if (n == 0) break;
            done += static_cast<std::size_t>(n);
        }
        bytes.resize(done);
        if (error.empty() && done > max) error = "too large for a record";
    }
    ::close(fd);
    if (!error.empty()) bytes.clear();
    return error;
}

}  // namespace xrc
