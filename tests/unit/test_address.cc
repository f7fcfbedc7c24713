// SPDX-License-Identifier: BSD-3-Clause
// The modex blob: round trip, a size that depends on nothing but ports and classes, and malformed input
// (truncated, hostile counts, wrong version, trailing bytes, impossible fields) rejected with a reason and without
// a crash.
#include "src/core/address.h"

#include <gtest/gtest.h>

#include <random>

using namespace xrc;

namespace {
ProcessAddress sample() {
    ProcessAddress a;
    PortAddress p;
    p.lid = 0x12;
    p.port_num = 1;
    p.mtu = 5;
    for (int i = 0; i < 16; ++i) p.gid[i] = static_cast<std::uint8_t>(i * 3);
    p.node_id = 1;
    p.cm_qpn = 0x2001;
    p.token = 0x0123456789abcdefull;
    p.srqs = {{256, 0x100}, {4096, 0x101}, {65536, 0x102}};
    a.ports.push_back(p);
    p.port_num = 2;
    p.lid = 0x13;
    a.ports.push_back(p);
    return a;
}
}  // namespace

TEST(Address, RoundTrip) {
    const auto a = sample();
    const auto bytes = encode_address(a);
    const auto b = decode_address(bytes);
    ASSERT_TRUE(b.has_value()) << b.error().message();
    EXPECT_EQ(a, *b);
}

TEST(Address, EveryTruncationIsRejected) {
    const auto bytes = encode_address(sample());
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        EXPECT_FALSE(decode_address(std::span(bytes.data(), n)).has_value()) << "accepted a blob cut at " << n;
    }
}

TEST(Address, TrailingBytesRejected) {
    auto bytes = encode_address(sample());
    bytes.push_back(0);
    EXPECT_FALSE(decode_address(bytes).has_value());
}

TEST(Address, WrongVersionNamed) {
    auto bytes = encode_address(sample());
    bytes[4] = 9;
    const auto b = decode_address(bytes);
    ASSERT_FALSE(b.has_value());
    EXPECT_NE(b.error().message().find("version 9"), std::string::npos) << b.error().message();
}

TEST(Address, SizeIsFixedByPortsAndClasses) {
    const auto a = sample();
    EXPECT_EQ(encode_address(a).size(), encoded_address_size(2, 3));
    EXPECT_EQ(encoded_address_size(1, 3), 70u);  // the default: one port, three receive classes
}

TEST(Address, HostileCountsDoNotAllocate) {
    auto bytes = encode_address(sample());
    // The first port's class count (offset: 8 header + 2+1+1+16+4+4+8 = 44) set to the maximum.
    bytes[44] = 0xff;
    bytes[45] = 0xff;
    EXPECT_FALSE(decode_address(bytes).has_value());
}

TEST(Address, ImpossibleFieldsRejected) {
    auto check = [](auto mutate, const char *what) {
        auto a = sample();
        mutate(a.ports[0]);
        EXPECT_FALSE(decode_address(encode_address(a)).has_value()) << what;
    };
    check([](PortAddress &p) { p.token = 0; }, "no token");
    check([](PortAddress &p) { p.cm_qpn = 1; }, "QP1 as the connection manager");
    check([](PortAddress &p) { p.cm_qpn = 0x1000000; }, "a 25-bit QP number");
    check([](PortAddress &p) { p.mtu = 9; }, "no such MTU");
    check([](PortAddress &p) { p.srqs[1].buffer_size = 100; }, "classes not ascending");
}

TEST(Address, RandomGarbageNeverCrashes) {
    std::mt19937 rng(42);
    const auto good = encode_address(sample());
    for (int i = 0; i < 20000; ++i) {
        auto bytes = good;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<std::uint8_t>(rng());
        bytes.resize(rng() % (bytes.size() + 8));
        (void)decode_address(bytes);  // must return, whatever it says
    }
    SUCCEED();
}

TEST(Address, PortIdentityIsTheGuidAndNeverTheLauncherNodeIdAlone) {
    PortAddress a, b;
    a.node_id = b.node_id = 0x80001234u;  // two nodes whose host names hash alike
    a.lid = 3;
    b.lid = 4;
    a.gid[15] = 0x11;
    b.gid[15] = 0x22;
    EXPECT_NE(port_identity(a), port_identity(b));
    b.gid[15] = 0x11;
    b.node_id = 9;  // same GUID: the same HCA port, whatever the label says
    EXPECT_EQ(port_identity(a), port_identity(b));
    PortAddress c, d;  // no GID: LID and node id
    c.lid = 5;
    d.lid = 6;
    EXPECT_NE(port_identity(c), port_identity(d));
    d.lid = 5;
    EXPECT_EQ(port_identity(c), port_identity(d));
}

// On demand, the guessed owner of the link to a peer's node is kept only when it is on the peer's very HCA port:
// a guess on another node whose launcher id collides with the peer's is dropped for the peer itself.
TEST(Address, LinkOwnerIsOnThePeersPortWhateverTheNodeIds) {
    PortAddress peer, same_port, other_node;
    peer.node_id = same_port.node_id = other_node.node_id = 0x936d3391u;  // host names that hash alike
    peer.lid = same_port.lid = 3;
    other_node.lid = 4;
    peer.gid[15] = same_port.gid[15] = 0x11;
    other_node.gid[15] = 0x22;
    EXPECT_EQ(link_owner(5, peer, 6, &same_port), 6u);
    EXPECT_EQ(link_owner(5, peer, 6, &other_node), 5u);
    EXPECT_EQ(link_owner(5, peer, 6, nullptr), 5u);  // the guess published no address
    EXPECT_EQ(link_owner(5, peer, 5, &peer), 5u);
    other_node.node_id = 1;  // different labels, same port: still the same node
    other_node.gid[15] = 0x11;
    other_node.lid = 3;
    EXPECT_EQ(link_owner(5, peer, 6, &other_node), 6u);
}

namespace {
// A port on fabric `prefix` (the GID's first 8 bytes) with interface id `guid`.
PortAddress port_on(std::uint64_t prefix, std::uint8_t port_num, std::uint8_t guid) {
    PortAddress p;
    p.port_num = port_num;
    for (int i = 0; i < 8; ++i) p.gid[i] = static_cast<std::uint8_t>(prefix >> (56 - 8 * i));
    p.gid[15] = guid;
    return p;
}
constexpr std::uint64_t kRail1 = 0xfe80000000000000ull, kRail2 = 0xfe80000000000001ull;
}  // namespace

TEST(Address, FabricIsTheSubnetPrefix) {
    EXPECT_EQ(fabric_of(port_on(kRail2, 1, 7)), kRail2);
    EXPECT_NE(fabric_of(port_on(kRail1, 1, 7)), fabric_of(port_on(kRail2, 1, 7)));
}

TEST(Address, RailsPairByFabricNotByPosition) {
    ProcessAddress mine, peer;
    mine.ports = {port_on(kRail1, 1, 1), port_on(kRail2, 2, 1)};
    peer.ports = {port_on(kRail2, 2, 2), port_on(kRail1, 1, 2)};  // listed the other way round
    EXPECT_EQ(paired_port(mine, 0, peer), &peer.ports[1]);
    EXPECT_EQ(paired_port(mine, 1, peer), &peer.ports[0]);
}

TEST(Address, APeerWithARailDownIsReachedOverTheRailsItHas) {
    ProcessAddress mine, peer;
    mine.ports = {port_on(kRail1, 1, 1), port_on(kRail2, 2, 1)};
    peer.ports = {port_on(kRail2, 2, 2)};  // its rail 1 was down at start-up: rail 2 is now its first port
    EXPECT_EQ(paired_port(mine, 0, peer), nullptr);
    EXPECT_EQ(paired_port(mine, 1, peer), &peer.ports[0]);
    ProcessAddress only_rail1;
    only_rail1.ports = {port_on(kRail1, 1, 1)};
    EXPECT_EQ(paired_port(only_rail1, 0, peer), nullptr);
    EXPECT_EQ(paired_port(mine, 2, peer), nullptr);  // no such port of mine
}

TEST(Address, PortsSharingAFabricPairInOrder) {
    ProcessAddress mine, peer;
    mine.ports = {port_on(kRail1, 1, 1), port_on(kRail1, 2, 1)};
    peer.ports = {port_on(kRail1, 1, 2), port_on(kRail1, 2, 2)};
    EXPECT_EQ(paired_port(mine, 0, peer), &peer.ports[0]);
    EXPECT_EQ(paired_port(mine, 1, peer), &peer.ports[1]);
    peer.ports.pop_back();  // fewer ports there: the second of mine reaches nobody rather than guessing
    EXPECT_EQ(paired_port(mine, 1, peer), nullptr);
    EXPECT_TRUE(ports_share_default_prefix(mine));
    mine.ports[1] = port_on(kRail2, 2, 1);
    EXPECT_FALSE(ports_share_default_prefix(mine));
}
