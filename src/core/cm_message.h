// SPDX-License-Identifier: BSD-3-Clause
// The connection manager's datagram (layout in wire_format.h): the only code that writes and reads it.
#pragma once

#include "result.h"
#include "wire_format.h"

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace xrc {

using CmBytes = std::array<std::uint8_t, kCmMessageSize>;

CmBytes encode_cm(const CmMessage &message) noexcept;

// Structural checks only (size, magic, version, type, reserved bits, QP numbers in range): whether the message
// is for us and from the job is the connection manager's business. The message, or why not (ErrorKind::malformed).
Result<CmMessage> decode_cm(std::span<const std::uint8_t> bytes);

const char *cm_type_name(CmType type) noexcept;
const char *cm_reject_name(CmReject reason) noexcept;

}  // namespace xrc
