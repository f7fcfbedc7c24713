// SPDX-License-Identifier: BSD-3-Clause
// The core's one way to say that something failed: an Error (what kind of failure, and a sentence for the admin
// that names what failed: the verbs call or file, and the device resource it was about), returned in a Result
// (result.h). Factories return a Result instead of constructing an object that may be left half built.
// Running out of memory is an Error too where the core allocates behind a noexcept call (kind resource, made by
// out_of_memory): its sentence is static (fixed), so reporting it allocates nothing. Elsewhere std::bad_alloc passes
// through the core and stops at the BTL's noexcept edges toward C.
#pragma once

#include <string>
#include <utility>

namespace xrc {

enum class ErrorKind {
    system,     // a verbs or system call refused (errno says why)
    resource,   // what was asked for does not fit the device (its limits, its queues), or host memory ran out
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
    // An Error whose sentence is `static_message` (a string literal, never copied): made without allocating, for
    // the paths where allocating may be what failed. A system one carries its errno (errnum()), not strerror's
    // text: the caller that prints it adds that.
    static Error fixed(ErrorKind kind, const char *static_message, int errnum = 0) noexcept {
        return Error(FixedTag{}, kind, static_message, errnum);
    }
    // Host memory ran out while allocating `what_failed` (a literal: "cannot allocate ...").
    static Error out_of_memory(const char *what_failed) noexcept { return fixed(ErrorKind::resource, what_failed); }

    ErrorKind kind() const noexcept { return kind_; }
    // The errno of a system error, 0 for the other kinds.
    int errnum() const noexcept { return errnum_; }
    // The whole sentence, as the BTL prints it (c_str() never allocates, message() copies).
    std::string message() const { return c_str(); }
    const char *c_str() const noexcept { return static_message_ != nullptr ? static_message_ : message_.c_str(); }

    // Context around the message, for a caller that knows more than the callee: "<prefix><message><suffix>".
    Error &wrap(const std::string &prefix, const std::string &suffix = {});

private:
    struct FixedTag {};  // not to be chosen for Error(kind, "text", errnum): that one copies its text
    Error(FixedTag, ErrorKind kind, const char *static_message, int errnum) noexcept
        : kind_(kind), static_message_(static_message), errnum_(errnum) {}

    ErrorKind kind_;
    std::string message_;  // empty while static_message_ says it
    const char *static_message_ = nullptr;
    int errnum_ = 0;
};

// Text or bytes that do not parse: `why` says where and how, for the admin.
inline Error malformed(std::string why) {
    return Error(ErrorKind::malformed, std::move(why));
}

}  // namespace xrc
