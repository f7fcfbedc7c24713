// SPDX-License-Identifier: BSD-3-Clause
#include "error.h"

#include <cerrno>
#include <cstring>

namespace xrc {

Error Error::system(const std::string &what, int errnum) {
    return Error(ErrorKind::system, what + ": " + std::strerror(errnum), errnum);
}

Error Error::from_errno(const std::string &what) {
    const int saved = errno;
    return system(what, saved);
}

Error &Error::wrap(const std::string &prefix, const std::string &suffix) {
    message_ = prefix + c_str() + suffix;
    static_message_ = nullptr;
    return *this;
}

}  // namespace xrc
