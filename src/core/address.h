// SPDX-License-Identifier: BSD-3-Clause
// What one process publishes through the PMIx modex, in one versioned binary blob, and the only code that
// reads and writes it. Per port (module): LID, GID, MTU, the node the process runs on, its connection manager's
// UD QP number and random token, and its XRC SRQ number and buffer size per receive class. Its size depends on
// neither the number of nodes nor the number of ranks: 8 + 38 + 8 * classes bytes per port (70 B with the default
// three classes). QP numbers of connections are never published: connections are made through the connection
// manager (connection_manager.h).
// Decoding never trusts the bytes: every count and length is checked, so a malformed blob is an error, not a
// crash.
#pragma once

#include "result.h"
#include "wire_format.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace xrc {

inline constexpr std::size_t kMaxPortsPerProcess = 16;
inline constexpr std::size_t kMaxReceiveClassesOnWire = 16;

struct SrqEntry {
    std::uint32_t buffer_size = 0;  // the receive class's buffer size
    std::uint32_t srq_num = 0;

    bool operator==(const SrqEntry &) const = default;
};

struct PortAddress {
    std::uint16_t lid = 0;
    std::uint8_t port_num = 0;
    std::uint8_t mtu = 0;  // ibv_mtu
    std::uint8_t gid[16] = {};
    std::uint32_t node_id = 0;   // the launcher's id of the process's node (PMIx node id)
    std::uint32_t cm_qpn = 0;    // the connection manager's UD QP
    std::uint64_t token = 0;     // random, nonzero: proves a connection request comes from the job
    std::vector<SrqEntry> srqs;  // one per receive class, ascending size

    bool operator==(const PortAddress &) const = default;
};

// Which HCA port an address is on, the identity routing rests on: two processes reach each other through the
// HCA's loopback, and share a connection from a remote sender, exactly when they publish the same port. It is the
// port GUID (the GID's interface id), which the fabric keeps unique (no hash: two nodes never look alike); an
// address without one (a zero GID) falls back to its LID and the launcher's node id. The launcher's node id
// alone is only a label for messages: it may be a hostname hash, or wrong (Slurm's PMIx before 25.05).
std::uint64_t port_identity(const PortAddress &address) noexcept;

// On demand, the rank that makes the TGT QP through which this process reaches `peer`'s node: `guess`
// (spread_owner_guess) when its address is on the very HCA port of the peer's, else the peer itself. Decided by
// port_identity(), never by the launcher's node id: with a hostname hash two nodes can carry the same id, and an
// owner on another node would make the TGT QP in that node's XRC domain, where the peer's SRQ number names
// another rank's queue.
std::uint32_t link_owner(std::uint32_t peer, const PortAddress &peer_address, std::uint32_t guess,
                         const PortAddress *guess_address) noexcept;

struct ProcessAddress {
    std::vector<PortAddress> ports;

    bool operator==(const ProcessAddress &) const = default;
};

// Which fabric a port is on: its GID's subnet prefix (the first 8 bytes). A port reaches another only within one
// fabric; rails are separate fabrics and the subnet manager of each should give it its own prefix.
std::uint64_t fabric_of(const PortAddress &address) noexcept;

// The peer's port that my port mine.ports[index] talks to: one on the same fabric, never one by position in the
// list (a port down at start-up on either side shifts positions). When several ports of a side share the fabric
// (a dual-port HCA on one fabric, or rails left on the default prefix fe80::), the k-th of mine on it pairs with
// the k-th of the peer's: a peer with fewer ports there is reached over fewer of mine, never over a port that may
// sit on another fabric with the same prefix. nullptr: the peer has no port I can pair with this one.
const PortAddress *paired_port(const ProcessAddress &mine, std::size_t index, const ProcessAddress &peer) noexcept;

// Whether two or more of these ports share the default subnet prefix fe80:: (then pairing cannot tell rails apart,
// and a rail down at start-up on one node makes its peers pair across fabrics: worth a warning).
bool ports_share_default_prefix(const ProcessAddress &mine) noexcept;

// Bytes encode_address writes for `ports` ports of `classes` receive classes each.
constexpr std::size_t encoded_address_size(std::size_t ports, std::size_t classes) noexcept {
    return 8 + ports * (38 + 8 * classes);
}

std::vector<std::uint8_t> encode_address(const ProcessAddress &address);

// The address, or why the blob is unusable (ErrorKind::malformed).
Result<ProcessAddress> decode_address(std::span<const std::uint8_t> bytes);

}  // namespace xrc
