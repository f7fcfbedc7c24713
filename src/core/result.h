// SPDX-License-Identifier: BSD-3-Clause
// Result<T>: a T, or the Error (error.h) that says why there is none; Result<void>: success or an Error. A small
// stand-in for C++23's std::expected<T, Error> (the build is C++20). Reading the value of a failed Result, or the
// error of a successful one, is a programming error (asserted).
//
//     Result<std::unique_ptr<RecvPool>> pool = RecvPool::make(...);
//     if (!pool) return pool.error();   // a Result<U> of any U takes an Error
//     use(**pool);
#pragma once

#include "error.h"

#include <cassert>
#include <optional>
#include <utility>
#include <variant>

namespace xrc {

template <class T>
class [[nodiscard]] Result {
public:
    Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
    Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}

    bool has_value() const noexcept { return v_.index() == 0; }
    explicit operator bool() const noexcept { return has_value(); }

    T &value() & {
        assert(has_value());
        return *std::get_if<0>(&v_);
    }
    const T &value() const & {
        assert(has_value());
        return *std::get_if<0>(&v_);
    }
    T &&value() && {
        assert(has_value());
        return std::move(*std::get_if<0>(&v_));
    }
    T &operator*() & { return value(); }
    const T &operator*() const & { return value(); }
    T &&operator*() && { return std::move(*this).value(); }
    T *operator->() { return &value(); }
    const T *operator->() const { return &value(); }

    const Error &error() const & {
        assert(!has_value());
        return *std::get_if<1>(&v_);
    }
    Error &&error() && {
        assert(!has_value());
        return std::move(*std::get_if<1>(&v_));
    }

private:
    std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
public:
    Result() = default;
    Result(Error error) : error_(std::move(error)) {}

    bool has_value() const noexcept { return !error_; }
    explicit operator bool() const noexcept { return has_value(); }

    const Error &error() const & {
        assert(error_);
        return *error_;
    }
    Error &&error() && {
        assert(error_);
        return std::move(*error_);
    }

private:
    std::optional<Error> error_;
};

}  // namespace xrc
