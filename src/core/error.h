// SPDX-License-Identifier: BSD-3-Clause
// The core's one way to say that something failed: an Error (what kind of failure, and a sentence for the admin
// that names what failed: the verbs call or file, and the device resource it was about), returned in a Result
// (result.h). Factories return a Result instead of constructing an object that may be left half built.
// Exceptions (std::bad_alloc) are not errors of this kind: they pass through the core and stop at the BTL's
// noexcept edges toward C.
#pragma once

#include <string>
#include <utility>

namespace xrc {

enum class ErrorKind {
    system,     // a verbs or system call refused (errno says why)
    resource,   // what was asked for does not fit the device (its limits, its queues)
    malformed,  // text or bytes that do not parse (a parameter value, a datagram, a record)
    gone,       // what was named no longer exists or now belongs to someone else
};

class Error {
public:
    Error(ErrorKind kind, std::string message, int errnum = 0)
        : kind_(kind), message_(std::move(message)), errnum_(errnum) {}

    // `what` failed with errno `errnum`: the message reads "what: strerror(errnum)".
    static Error system(const std::string &what, int errnum);
    // As system(), with the calling thread's errno (read first, before anything may change it).
    static Error from_errno(const std::string &what);

    ErrorKind kind() const noexcept { return kind_; }
    // The errno of a system error, 0 for the other kinds.
    int errnum() const noexcept { return errnum_; }
    // The whole sentence, as the BTL prints it.
    const std::string &message() const noexcept { return message_; }
    const char *c_str() const noexcept { return message_.c_str(); }

    // Context around the message, for a caller that knows more than the callee: "<prefix><message><suffix>".
    Error &wrap(const std::string &prefix, const std::string &suffix = {});

private:
    ErrorKind kind_;
    std::string message_;
    int errnum_ = 0;
};

// Text or bytes that do not parse: `why` says where and how, for the admin.
inline Error malformed(std::string why) {
    return Error(ErrorKind::malformed, std::move(why));
}

}  // namespace xrc
