// SPDX-License-Identifier: BSD-3-Clause
#include "cm_message.h"

namespace xrc {
namespace {

template <class T>
void put(std::uint8_t *at, T value) noexcept {
    for (std::size_t i = 0; i < sizeof(T); ++i) at[i] = static_cast<std::uint8_t>(value >> (8 * i));
}

template <class T>
T get(const std::uint8_t *at) noexcept {
    T value = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(static_cast<T>(at[i]) << (8 * i));
    return value;
}

constexpr std::uint32_t kMaxQpn = 0xffffff;
// Unicast LIDs: 0 is no LID, 0xc000 and up are multicast, 0xffff the permissive LID.
constexpr std::uint16_t kFirstMulticastLid = 0xc000;

bool is_address(CmType type) noexcept {
    return type == CmType::Address || type == CmType::AddressAck;
}
bool unicast_lid(std::uint16_t lid) noexcept {
    return lid != 0 && lid < kFirstMulticastLid;
}

}  // namespace

CmBytes encode_cm(const CmMessage &m) noexcept {
    CmBytes b{};
    put<std::uint32_t>(&b[0], kCmMagic);
    b[4] = kCmVersion;
    b[5] = static_cast<std::uint8_t>(m.type);
    put<std::uint16_t>(&b[6], static_cast<std::uint16_t>(m.reason));
    put<std::uint32_t>(&b[8], m.jobid);
    put<std::uint32_t>(&b[12], m.src_rank);
    put<std::uint32_t>(&b[16], m.dst_rank);
    put<std::uint32_t>(&b[20], m.port_index);
    put<std::uint64_t>(&b[24], m.token);
    put<std::uint32_t>(&b[32], m.generation);
    if (is_address(m.type)) {
        put<std::uint64_t>(&b[36], m.port_guid);
        put<std::uint16_t>(&b[44], m.old_lid);
        put<std::uint16_t>(&b[46], m.new_lid);
        return b;
    }
    put<std::uint32_t>(&b[36], m.ini_qpn);
    put<std::uint32_t>(&b[40], m.tgt_qpn);
    put<std::uint32_t>(&b[44], m.named_rank == kCmNoRank ? 0 : m.named_rank + 1);
    return b;
}

Result<CmMessage> decode_cm(std::span<const std::uint8_t> bytes) {
    if (bytes.size() != kCmMessageSize)
        return malformed(std::to_string(bytes.size()) + " bytes, a connection manager datagram has " +
                         std::to_string(kCmMessageSize));
    const std::uint8_t *b = bytes.data();
    if (get<std::uint32_t>(b) != kCmMagic) return malformed("bad magic");
    if (b[4] != kCmVersion)
        return malformed("version " + std::to_string(b[4]) + ", this build speaks " + std::to_string(kCmVersion));
    CmMessage m;
    const std::uint8_t type = b[5];
    if (type < static_cast<std::uint8_t>(CmType::Connect) || type > static_cast<std::uint8_t>(CmType::ProbeAck))
        return malformed("unknown type " + std::to_string(type));
    m.type = static_cast<CmType>(type);
    const std::uint16_t reason = get<std::uint16_t>(b + 6);
    if (reason > static_cast<std::uint16_t>(CmReject::Unknown)) return malformed("unknown reject reason");
    m.reason = static_cast<CmReject>(reason);
    if ((m.type == CmType::Reject) != (m.reason != CmReject::None)) return malformed("reject reason on the wrong type");
    m.jobid = get<std::uint32_t>(b + 8);
    m.src_rank = get<std::uint32_t>(b + 12);
    m.dst_rank = get<std::uint32_t>(b + 16);
    m.port_index = get<std::uint32_t>(b + 20);
    m.token = get<std::uint64_t>(b + 24);
    m.generation = get<std::uint32_t>(b + 32);
    if (m.token == 0) return malformed("no token");
    if (m.generation == 0) return malformed("generation 0");
    if (is_address(m.type)) {
        m.port_guid = get<std::uint64_t>(b + 36);
        m.old_lid = get<std::uint16_t>(b + 44);
        m.new_lid = get<std::uint16_t>(b + 46);
        if (m.port_guid == 0) return malformed("no port identity");
        if (!unicast_lid(m.old_lid) || !unicast_lid(m.new_lid) || m.old_lid == m.new_lid)
            return malformed("bad LIDs " + std::to_string(m.old_lid) + " -> " + std::to_string(m.new_lid));
        return m;
    }
    m.ini_qpn = get<std::uint32_t>(b + 36);
    m.tgt_qpn = get<std::uint32_t>(b + 40);
    const std::uint32_t named = get<std::uint32_t>(b + 44);
    if (m.type == CmType::Probe || m.type == CmType::ProbeAck) {  // about a broken link: no QP is named
        if (m.ini_qpn != 0 || m.tgt_qpn != 0 || named != 0) return malformed("a probe names no QP");
        m.named_rank = kCmNoRank;
        return m;
    }
    const bool about_initiator = m.type == CmType::Hold || m.type == CmType::Held || m.type == CmType::Release;
    if (named != 0 && !about_initiator && m.type != CmType::Accept) return malformed("reserved bits set");
    if (named == 0 && about_initiator) return malformed("names no initiator");
    m.named_rank = named == 0 ? kCmNoRank : named - 1;
    if (m.ini_qpn < 2 || m.ini_qpn > kMaxQpn) return malformed("bad INI QP number");
    // CLOSE (and its ACK) may name no TGT QP: an initiator that gave up before it heard which one was made.
    const bool names_tgt = m.type == CmType::Accept || m.type == CmType::Close || m.type == CmType::CloseAck ||
                           m.type == CmType::Leaving || m.type == CmType::LeavingAck || about_initiator;
    const bool tgt_optional = m.type == CmType::Close || m.type == CmType::CloseAck;
    if (names_tgt ? ((m.tgt_qpn < 2 && !(tgt_optional && m.tgt_qpn == 0)) || m.tgt_qpn > kMaxQpn) : m.tgt_qpn != 0)
        return malformed("bad TGT QP number");
    return m;
}

const char *cm_type_name(CmType type) noexcept {
    switch (type) {
    case CmType::Connect: return "CONNECT";
    case CmType::Accept: return "ACCEPT";
    case CmType::Reject: return "REJECT";
    case CmType::Close: return "CLOSE";
    case CmType::CloseAck: return "CLOSE_ACK";
    case CmType::Leaving: return "LEAVING";
    case CmType::LeavingAck: return "LEAVING_ACK";
    case CmType::Address: return "ADDRESS";
    case CmType::AddressAck: return "ADDRESS_ACK";
    case CmType::Hold: return "HOLD";
    case CmType::Held: return "HELD";
    case CmType::Release: return "RELEASE";
    case CmType::Probe: return "PROBE";
    case CmType::ProbeAck: return "PROBE_ACK";
    }
    return "?";
}

const char *cm_reject_name(CmReject reason) noexcept {
    switch (reason) {
    case CmReject::None: return "none";
    case CmReject::Resources: return "the target cannot create an XRC receive QP";
    case CmReject::Finalizing: return "the target is finalizing";
    case CmReject::Unknown: return "the target cannot read this process's modex address";
    }
    return "?";
}

}  // namespace xrc
