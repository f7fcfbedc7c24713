// SPDX-License-Identifier: BSD-3-Clause
// Every format btl-xrc puts on the wire or into another process's memory, in one place, each with its own
// magic and version so that mixed builds in one job are detected, never misread:
//   the immediate data of every SRQ send (tag and flags),
//   the footer of an eager RDMA ring message and the ring set-up messages (EagerControl),
//   the connection manager's datagrams (CmMessage),
//   the modex blob's header (its codec is address.cc),
//   the header of a message carried by another rail than its own (ForwardedHeader, failover.h).
// All multi-byte fields of the datagrams and the blob are little endian, written and read field by field by
// their codecs; the eager footer and control messages are read only by the same build on the same machine
// type (a job runs one build), so they are plain structs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xrc {

// ------------------------------------------------------------------------------------------------ immediate data
// SEND_WITH_IMM on the SRQ path: [31:16] marker "XR", [15:8] flags, [7:0] the BTL tag. A message whose marker is
// wrong or whose flags are unknown is dropped, never handed to a tag callback.
inline constexpr std::uint32_t kImmMarker = 0x58520000u;
inline constexpr std::uint32_t kImmMarkerMask = 0xffff0000u;
inline constexpr std::uint32_t kImmFlagMask = 0x0000ff00u;
// An eager RDMA set-up message (EagerControl), for the eager manager (eager_manager.h), never a tag callback.
inline constexpr std::uint32_t kImmControl = 0x0100u;
// Carries nothing: a signaled send that retires the unsignaled ones before a connection is closed.
inline constexpr std::uint32_t kImmNop = 0x0200u;
// The first message this sender sends the receiver over a new connection: the receiver opens its own handle on
// the TGT QP it arrived through (wc.qp_num), so the QP lives as long as someone receives through it.
inline constexpr std::uint32_t kImmFirst = 0x0400u;
inline constexpr std::uint32_t kImmKnownFlags = kImmControl | kImmNop | kImmFirst;

inline constexpr std::uint32_t make_imm(std::uint8_t tag) noexcept {
    return kImmMarker | tag;
}
inline constexpr bool imm_valid(std::uint32_t imm) noexcept {
    return (imm & kImmMarkerMask) == kImmMarker && (imm & kImmFlagMask & ~kImmKnownFlags) == 0;
}
inline constexpr std::uint8_t imm_tag(std::uint32_t imm) noexcept {
    return static_cast<std::uint8_t>(imm & 0xffu);
}

// ---------------------------------------------------------------------------------------- eager RDMA ring footer
// The last 24 bytes of every span a writer puts into a peer's ring (layout in eager_rdma.h).
inline constexpr std::uint32_t kEagerFooterSize = 24;
struct EagerFooter {
    std::uint32_t length;
    std::uint32_t marker_tag;  // kEagerMarker | BTL tag
    std::uint64_t ack;         // ring position the writer consumed of the reader's writes (piggybacked credit)
    std::uint64_t seq;         // messages written so far, from 1: the word the reader polls
};
static_assert(sizeof(EagerFooter) == kEagerFooterSize);
inline constexpr std::uint32_t kEagerMarker = 0x45520000u;  // "ER"

// Ring set-up, sent over the SRQ path with kImmControl. Resume: a writer whose connection timed out asks to write
// into its ring again, saying where it stopped (the receiver answers Resumed when it stands at the same place, or
// Refuse: the writer then stays on the SRQs).
enum class EagerControlType : std::uint32_t { Request = 1, Grant = 2, Refuse = 3, Resume = 4, Resumed = 5 };
struct EagerControl {
    std::uint32_t magic_version;  // kEagerControlMagic
    EagerControlType type;
    std::uint32_t rank;  // the sender of this message
    std::uint32_t rkey;
    std::uint64_t addr;       // Request: the credit word; Grant: the ring; Resume: the ring position written up to
    std::uint32_t slots;      // Resume: messages written into the ring, low 32 bits
    std::uint32_t slot_size;  // Resume: messages written into the ring, high 32 bits
};
static_assert(sizeof(EagerControl) == 32);
inline constexpr std::uint32_t kEagerControlMagic = 0x58454302u;  // "XEC" version 2 (spans in one ring)

// ------------------------------------------------------------------------------------ connection manager datagram
// One UD datagram, always kCmMessageSize bytes (a shorter or longer one is malformed).
//   CONNECT   initiator -> the rank of the target node it chose: make a TGT QP for my INI QP `ini_qpn`
//   ACCEPT    -> initiator: the TGT QP `tgt_qpn` is ready (RTR) toward your INI QP
//   REJECT    -> initiator: `reason` (CmReject)
//   CLOSE     initiator -> the TGT's creator and every rank that may hold a handle on it: drop it
//   CLOSE_ACK -> initiator
//   LEAVING, LEAVING_ACK, ADDRESS, ADDRESS_ACK, HOLD, HELD: below
// `token` is the destination's random token from its modex blob: only the job's processes can read it, so a
// datagram from anyone else (another job, garbage) is rejected before it can create anything. `generation`
// counts the initiator's connection attempts (per process, from 1), so a duplicate of an old CONNECT is told
// apart from a new one and never resurrects a closed connection.
inline constexpr std::uint32_t kCmMagic = 0x314d4358u;  // "XCM1"
inline constexpr std::uint8_t kCmVersion = 1;
inline constexpr std::size_t kCmMessageSize = 48;
inline constexpr std::uint32_t kCmNoRank = 0xffffffffu;

// The Q_Key of a process's connection manager QP, from its token: a datagram from anyone who does not know the
// token is dropped by the receiving HCA already (the high bit, which marks privileged Q_Keys, stays clear).
inline constexpr std::uint32_t cm_qkey(std::uint64_t token) noexcept {
    return static_cast<std::uint32_t>(token ^ (token >> 32)) & 0x7fffffffu;
}

// LEAVING: a TGT QP's creator leaves MPI_Finalize before its initiator closed the link (it waited its bound). The
// initiator signals every send on that link from then on, retires what it posted before with a fence toward the
// creator's SRQ (still there: the creator waits for the answer), and answers LEAVING_ACK once that fence
// completed (at once when nothing was outstanding); it later closes the link without a fence and without a CLOSE.
// The creator retransmits LEAVING until the answer or its bound, then drops the TGT QP.
// LEAVING_ACK: initiator -> creator, names the same connection and TGT QP.
// ADDRESS: the sender's HCA port got a new LID (LID_CHANGE, CLIENT_REREGISTER): `port_guid` (port_identity() of
// its address, which a LID change leaves alone), `old_lid` and `new_lid` take the place of the QP numbers and the
// reserved word; `generation` counts the sender's announcements (from 1). It arrives from the new LID: the
// receiver accepts that source only when its stored address of the sender still has `old_lid`. The receiver
// updates every stored address of that port and moves the paths of its QPs toward it (connections.md).
// ADDRESS_ACK: -> the announcer, the same port, LIDs and generation. ADDRESS is retransmitted until then (bounded).
// HOLD: a TGT QP's creator -> one rank of its node, before ACCEPT: open a handle of your own on TGT QP `tgt_qpn`
// (toward INI QP `ini_qpn` of rank `named_rank`, connection `generation`), so that the QP outlives its creator's
// death (with User-Level Failure Mitigation) even when no other rank of the node has received through it yet.
// HELD: -> the creator, the same fields, once the handle is held. ACCEPT then names the holder (`named_rank`), whom
// the initiator's CLOSE reaches too. HOLD is retransmitted until HELD (bounded: ACCEPT goes without a holder).
// RELEASE: a TGT QP's creator -> every other rank of its node, once the initiator (`named_rank`) is known dead:
// drop your handle on TGT QP `tgt_qpn` (toward INI QP `ini_qpn`, connection `generation`) if you hold one. A rank
// opens a handle on the first message it receives through a TGT QP without learning whose it is, so only the
// creator can say. Sent once, not answered: a lost one leaves that handle until the rank's finalize.
// PROBE: a process whose connection to a node broke while its own port stayed up (the path was lost: its requests
// went unacknowledged for the retry budget, and the node's traffic went over another rail) -> the rank it
// connected through there: are you reachable again? No QP numbers (`ini_qpn` and `tgt_qpn` 0); `generation` is the
// broken link's. Retransmitted with backoff while the link stays broken; nothing is made for it.
// PROBE_ACK: -> the prober, the same generation. Each end's broken link toward the other starts over, and the
// traffic moved to another rail comes back with the next connection.
enum class CmType : std::uint8_t {
    Connect = 1,
    Accept = 2,
    Reject = 3,
    Close = 4,
    CloseAck = 5,
    Leaving = 6,
    LeavingAck = 7,
    Address = 8,
    AddressAck = 9,
    Hold = 10,
    Held = 11,
    Release = 12,
    Probe = 13,
    ProbeAck = 14
};
enum class CmReject : std::uint16_t {
    None = 0,
    Resources = 1,   // the target could not create or ready a TGT QP
    Finalizing = 2,  // the target is leaving the job
    Unknown = 3,     // the target cannot read the initiator's modex address
};

struct CmMessage {
    CmType type = CmType::Connect;
    CmReject reason = CmReject::None;
    std::uint32_t jobid = 0;
    std::uint32_t src_rank = 0;
    std::uint32_t dst_rank = 0;
    std::uint64_t token = 0;
    std::uint32_t generation = 0;
    std::uint32_t ini_qpn = 0;
    std::uint32_t tgt_qpn = 0;
    std::uint32_t port_index = 0;  // the sender's port (module) position, for messages: pairing is by fabric
    // ACCEPT: the creator's node-mate that holds a handle on the TGT QP too (kCmNoRank: none); HOLD, HELD: the
    // initiator whose connection it is. kCmNoRank in every other type. On the wire: the rank + 1, 0 for none.
    std::uint32_t named_rank = kCmNoRank;
    // ADDRESS and ADDRESS_ACK only (zero in every other type).
    std::uint64_t port_guid = 0;
    std::uint16_t old_lid = 0;
    std::uint16_t new_lid = 0;

    bool operator==(const CmMessage &) const = default;
};

// ----------------------------------------------------------------------------------------- forwarded message
// With several rails, a message carried by another rail than the one it was sent for (the BTL's failover) travels
// under a tag of its own behind this header: the rail it belongs to (its fabric: the GID's subnet prefix), its own
// tag, and, for a copy sent again after that rail failed it, its place there (replay_filter.h): the stream
// (ReplayStream), the connection (our TGT QP, the sender's INI QP) for the SRQ stream, the writer's rank for the
// ring's, and the position. Read by failover.h's decoder, which refuses a short one or another version.
inline constexpr std::uint32_t kForwardedMagic = 0x58465701u;  // "XFW" version 1
struct ForwardedHeader {
    std::uint32_t magic_version;
    std::uint8_t tag;
    std::uint8_t stream;
    std::uint16_t reserved;
    std::uint8_t subnet_prefix[8];
    std::uint32_t tgt_qpn;
    std::uint32_t ini_qpn;
    std::uint32_t seq;
    std::uint32_t rank;
};
static_assert(sizeof(ForwardedHeader) == 32);  // the message behind it stays 8-byte aligned

// ------------------------------------------------------------------------------------------------- modex blob
// The magic stays across versions, so that a blob of another version is named as such.
inline constexpr std::uint32_t kAddressMagic = 0x31435258u;  // "XRC1"
inline constexpr std::uint16_t kAddressVersion = 2;

}  // namespace xrc
