// The modex blob: round trip, and malformed input (truncated, hostile counts, wrong version, trailing bytes)
// rejected with a reason and without a crash.
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
    p.node_index = 1;
    p.srqs = {{256, 0x100}, {4096, 0x101}, {65536, 0x102}};
    p.ini_qp_by_node = {0x2001, 0x2002, 0x2003};
    p.tgt_qps = {{0, 0x3000}, {4, 0x3001}};
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
    ProcessAddress b;
    ASSERT_EQ(decode_address(bytes, b), "");
    EXPECT_EQ(a, b);
}

TEST(Address, EveryTruncationIsRejected) {
    const auto bytes = encode_address(sample());
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        ProcessAddress b;
        EXPECT_NE(decode_address(std::span(bytes.data(), n), b), "") << "accepted a blob cut at " << n;
    }
}

TEST(Address, TrailingBytesRejected) {
    auto bytes = encode_address(sample());
    bytes.push_back(0);
    ProcessAddress b;
    EXPECT_NE(decode_address(bytes, b), "");
}

TEST(Address, WrongVersionNamed) {
    auto bytes = encode_address(sample());
    bytes[4] = 9;
    ProcessAddress b;
    const auto why = decode_address(bytes, b);
    EXPECT_NE(why.find("version 9"), std::string::npos) << why;
}

TEST(Address, HostileCountsDoNotAllocate) {
    auto bytes = encode_address(sample());
    // The first port's TGT count (offset: 8 header + 2+1+1+16+4+2+4 = 38) set to the maximum.
    bytes[38] = 0xff;
    bytes[39] = 0xff;
    bytes[40] = 0xff;
    bytes[41] = 0x00;
    ProcessAddress b;
    EXPECT_NE(decode_address(bytes, b), "");
}

TEST(Address, RandomGarbageNeverCrashes) {
    std::mt19937 rng(42);
    const auto good = encode_address(sample());
    for (int i = 0; i < 20000; ++i) {
        auto bytes = good;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<std::uint8_t>(rng());
        bytes.resize(rng() % (bytes.size() + 8));
        ProcessAddress b;
        (void)decode_address(bytes, b);  // must return, whatever it says
    }
    SUCCEED();
}
