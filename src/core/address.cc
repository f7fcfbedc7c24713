// SPDX-License-Identifier: BSD-3-Clause
#include "address.h"

#include <cstring>

namespace xrc {
namespace {

class Writer {
public:
    explicit Writer(std::vector<std::uint8_t> &out) : out_(out) {}
    template <class T>
    void put(T value) {
        std::uint8_t bytes[sizeof(T)];
        for (std::size_t i = 0; i < sizeof(T); ++i) bytes[i] = static_cast<std::uint8_t>(value >> (8 * i));
        out_.insert(out_.end(), bytes, bytes + sizeof(T));
    }
    void put_bytes(const std::uint8_t *data, std::size_t n) { out_.insert(out_.end(), data, data + n); }

private:
    std::vector<std::uint8_t> &out_;
};

class Reader {
public:
    explicit Reader(std::span<const std::uint8_t> in) : in_(in) {}
    template <class T>
    bool get(T &value) {
        if (in_.size() - pos_ < sizeof(T)) return false;
        T v = 0;
        for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(in_[pos_ + i]) << (8 * i));
        value = v;
        pos_ += sizeof(T);
        return true;
    }
    bool get_bytes(std::uint8_t *data, std::size_t n) {
        if (in_.size() - pos_ < n) return false;
        std::memcpy(data, in_.data() + pos_, n);
        pos_ += n;
        return true;
    }
    std::size_t remaining() const { return in_.size() - pos_; }

private:
    std::span<const std::uint8_t> in_;
    std::size_t pos_ = 0;
};

}  // namespace

std::uint64_t port_identity(const PortAddress &address) noexcept {
    std::uint64_t guid = 0;
    for (int i = 8; i < 16; ++i) guid = (guid << 8) | address.gid[i];
    if (guid != 0) return guid;
    return (std::uint64_t{1} << 63) | (std::uint64_t{address.lid} << 32) | address.node_id;
}

std::uint32_t link_owner(std::uint32_t peer, const PortAddress &peer_address, std::uint32_t guess,
                         const PortAddress *guess_address) noexcept {
    if (guess == peer || guess_address == nullptr) return peer;
    return port_identity(*guess_address) == port_identity(peer_address) ? guess : peer;
}

std::uint64_t fabric_of(const PortAddress &address) noexcept {
    std::uint64_t prefix = 0;
    for (int i = 0; i < 8; ++i) prefix = (prefix << 8) | address.gid[i];
    return prefix;
}

const PortAddress *paired_port(const ProcessAddress &mine, std::size_t index, const ProcessAddress &peer) noexcept {
    if (index >= mine.ports.size()) return nullptr;
    const std::uint64_t fabric = fabric_of(mine.ports[index]);
    std::size_t k = 0;  // how many of my ports before this one are on the same fabric
    for (std::size_t i = 0; i < index; ++i) k += fabric_of(mine.ports[i]) == fabric;
    for (const auto &port : peer.ports)
        if (fabric_of(port) == fabric && k-- == 0) return &port;
    return nullptr;
}

bool ports_share_default_prefix(const ProcessAddress &mine) noexcept {
    constexpr std::uint64_t kDefaultPrefix = 0xfe80000000000000ull;
    std::size_t on_default = 0;
    for (const auto &port : mine.ports) on_default += fabric_of(port) == kDefaultPrefix;
    return on_default > 1;
}

std::vector<std::uint8_t> encode_address(const ProcessAddress &address) {
    std::vector<std::uint8_t> out;
    Writer w(out);
    w.put<std::uint32_t>(kAddressMagic);
    w.put<std::uint16_t>(kAddressVersion);
    w.put<std::uint16_t>(static_cast<std::uint16_t>(address.ports.size()));
    for (const auto &p : address.ports) {
        w.put<std::uint16_t>(p.lid);
        w.put<std::uint8_t>(p.port_num);
        w.put<std::uint8_t>(p.mtu);
        w.put_bytes(p.gid, sizeof(p.gid));
        w.put<std::uint32_t>(p.node_id);
        w.put<std::uint32_t>(p.cm_qpn);
        w.put<std::uint64_t>(p.token);
        w.put<std::uint16_t>(static_cast<std::uint16_t>(p.srqs.size()));
        for (const auto &srq : p.srqs) {
            w.put<std::uint32_t>(srq.buffer_size);
            w.put<std::uint32_t>(srq.srq_num);
        }
    }
    return out;
}

Result<ProcessAddress> decode_address(std::span<const std::uint8_t> bytes) {
    ProcessAddress out;
    Reader r(bytes);
    std::uint32_t magic = 0;
    std::uint16_t version = 0, ports = 0;
    if (!r.get(magic) || magic != kAddressMagic) return malformed("not an xrc address (bad magic)");
    if (!r.get(version)) return malformed("truncated header");
    if (version != kAddressVersion)
        return malformed("address version " + std::to_string(version) + ", this build speaks " +
                         std::to_string(kAddressVersion) + " (mixed btl-xrc versions in one job?)");
    if (!r.get(ports)) return malformed("truncated header");
    if (ports == 0 || ports > kMaxPortsPerProcess) return malformed("bad port count " + std::to_string(ports));
    out.ports.resize(ports);
    for (auto &p : out.ports) {
        std::uint16_t srqs = 0;
        if (!r.get(p.lid) || !r.get(p.port_num) || !r.get(p.mtu) || !r.get_bytes(p.gid, sizeof(p.gid)) ||
            !r.get(p.node_id) || !r.get(p.cm_qpn) || !r.get(p.token) || !r.get(srqs))
            return malformed("truncated port record");
        if (p.mtu < 1 || p.mtu > 5) return malformed("bad MTU code " + std::to_string(p.mtu));
        if (p.cm_qpn < 2 || p.cm_qpn > 0xffffff) return malformed("bad connection manager QP number");
        if (p.token == 0) return malformed("no connection token");
        if (srqs == 0 || srqs > kMaxReceiveClassesOnWire)
            return malformed("bad receive class count " + std::to_string(srqs));
        if (r.remaining() < 8u * srqs) return malformed("truncated receive classes");
        p.srqs.resize(srqs);
        for (auto &srq : p.srqs) {
            r.get(srq.buffer_size);
            r.get(srq.srq_num);
            if (srq.srq_num > 0xffffff) return malformed("bad SRQ number");
        }
        for (std::size_t i = 1; i < p.srqs.size(); ++i)
            if (p.srqs[i].buffer_size <= p.srqs[i - 1].buffer_size) return malformed("receive classes not ascending");
    }
    if (r.remaining() != 0) return malformed(std::to_string(r.remaining()) + " unexpected trailing bytes");
    return out;
}

}  // namespace xrc
