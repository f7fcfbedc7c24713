// SPDX-License-Identifier: BSD-3-Clause
// The receive-queue specification of btl_xrc_receive_queues: which receive size classes a process posts.
//
// Grammar (what an admin types):   CLASS[:CLASS]...      CLASS = [X,]SIZE,COUNT[,LOW]
//   SIZE   buffer bytes of the class, a positive integer, optional binary suffix K or M (4K = 4096)
//   COUNT  receive buffers posted to the class's XRC SRQ
//   LOW    low watermark: when fewer than LOW buffers remain posted, the SRQ limit event makes the owner
//          repost (default COUNT/4). 0 <= LOW < COUNT.
//   X,     accepted and ignored, so openib's XRC queue strings ("X,128,256,192") carry over.
// Classes must be strictly ascending in SIZE. One XRC SRQ per class per process.
#pragma once

#include "result.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xrc {

struct ReceiveQueueClass {
    std::size_t buffer_size = 0;
    std::uint32_t count = 0;
    std::uint32_t low_watermark = 0;

    bool operator==(const ReceiveQueueClass &) const = default;
};

struct ReceiveQueueSpec {
    std::vector<ReceiveQueueClass> classes;
};

// Limits the parser enforces without a device (the device's own limits are checked when it is opened).
inline constexpr std::size_t kMinReceiveBufferSize = 64;                    // a header plus a little payload
inline constexpr std::size_t kMaxReceiveBufferSize = std::size_t{1} << 30;  // 1 GiB
inline constexpr std::uint32_t kMaxReceiveCount = 1u << 22;
inline constexpr std::size_t kMaxReceiveClasses = 8;

// The accepted form, quoted in error messages.
inline constexpr std::string_view kReceiveQueueSyntax =
    "SIZE,COUNT[,LOW][:SIZE,COUNT[,LOW]]... with SIZE strictly ascending (64 B to 1 GiB, K/M suffixes allowed), "
    "1 <= COUNT <= 4194304, 0 <= LOW < COUNT (default COUNT/4), at most 8 classes";

// The classes, or what is wrong with the text, for the admin (ErrorKind::malformed).
Result<ReceiveQueueSpec> parse_receive_queues(std::string_view text);

// Checks that hold only together with other settings (ErrorKind::resource when they do not).
Result<void> check_receive_queues_cover(const ReceiveQueueSpec &spec, std::size_t max_send_size);
Result<void> check_receive_queues_fit_device(const ReceiveQueueSpec &spec, std::uint32_t max_srq_wr);

}  // namespace xrc
