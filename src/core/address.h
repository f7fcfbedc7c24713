// What one process publishes through the PMIx modex, in one versioned binary blob, and the only code that
// reads and writes it. Everything a peer needs to connect without a connection manager:
//   per port (module): LID, GID, MTU, the node the process runs on, its XRC SRQ number and buffer size per receive class,
//   its XRC INI QP number toward every node of the job, and the TGT QPs it created for remote senders.
// Decoding never trusts the bytes: every count and length is checked, so a malformed blob is an error, not a
// crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace xrc {

inline constexpr std::uint32_t kAddressMagic = 0x31435258;  // "XRC1"
inline constexpr std::uint16_t kAddressVersion = 1;
inline constexpr std::size_t kMaxPortsPerProcess = 16;
inline constexpr std::size_t kMaxReceiveClassesOnWire = 16;
inline constexpr std::size_t kMaxNodesOnWire = 1u << 20;
inline constexpr std::size_t kMaxTgtEntriesOnWire = 1u << 24;

struct TgtEntry {
    std::uint32_t sender_rank = 0;  // the remote sending process this TGT QP serves
    std::uint32_t qp_num = 0;

    bool operator==(const TgtEntry &) const = default;
};

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
    std::uint32_t node_index = 0;                // index of the process's node in the job's node list
    std::vector<SrqEntry> srqs;                  // one per receive class, ascending size
    std::vector<std::uint32_t> ini_qp_by_node;   // INI QP number toward node k (k = node index)
    std::vector<TgtEntry> tgt_qps;               // TGT QPs this process created, by sender

    bool operator==(const PortAddress &) const = default;
};

struct ProcessAddress {
    std::vector<PortAddress> ports;

    bool operator==(const ProcessAddress &) const = default;
};

std::vector<std::uint8_t> encode_address(const ProcessAddress &address);

// Returns an empty string on success, otherwise why the blob is unusable.
std::string decode_address(std::span<const std::uint8_t> bytes, ProcessAddress &out);

}  // namespace xrc
