// SPDX-License-Identifier: BSD-3-Clause
// The connection-establishment exchange between two librdmacm processes, carried over the TCP
// connection from the active id's port to the listening id's port. It plays the IB CM's MADs: REQ, REP,
// REJ, RTU, DREQ (SIDR REQ/REP are REQ/REP on an unconnected port space). Fixed-size frames: the CM
// sends a handful per connection, and a fixed size keeps parsing trivial.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace simhca_cm {

enum class MsgType : uint8_t { Req = 1, Rep = 2, Rej = 3, Rtu = 4, Dreq = 5 };

// IB CM private data sizes left to the application (after the CM's own header on a REQ), which the
// kernel also reports as the event's private_data_len (the data is zero-padded to them).
constexpr unsigned kReqPrivate = 56, kRepPrivate = 196, kRejPrivate = 148, kSidrReqPrivate = 180,
                   kSidrRepPrivate = 136;
// Reject reasons / SIDR statuses reported in event->status.
constexpr int kRejInvalidServiceId = 8, kRejConsumerDefined = 28, kRejVendorOptionNotSupported = 35;
constexpr int kSidrUnsupported = 1, kSidrReject = 2;

constexpr uint32_t kMagic = 0x53434d32; // "SCM2": REQ frames carry the port space

struct WireMsg {
    uint32_t magic;
    MsgType type;
    uint8_t private_len;
    uint8_t responder_resources;
    uint8_t initiator_depth;
    uint8_t retry_count;
    uint8_t rnr_retry_count;
    uint8_t srq;
    uint8_t connected;   // REQ: the requester's QP is connected (RC): a refusal is a REJ, else a SIDR REP
    uint32_t qpn;
    uint32_t psn;
    uint32_t qkey;
    int32_t status;
    uint16_t lid;
    uint16_t port_space; // REQ: the IB CM's service ID is port space and port; a listener matches both
    uint8_t gid[16];
    uint8_t private_data[256];
};

} // namespace simhca_cm
