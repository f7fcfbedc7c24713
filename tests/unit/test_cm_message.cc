// SPDX-License-Identifier: BSD-3-Clause
// The connection manager's datagram: round trip of every type, a fixed size, and malformed input (truncated,
// padded, wrong magic or version, unknown type, reserved bits, impossible QP numbers) rejected with a reason.
#include "src/core/cm_message.h"

#include <gtest/gtest.h>

#include <random>

using namespace xrc;

namespace {
CmMessage sample(CmType type) {
    CmMessage m;
    m.type = type;
    m.reason = type == CmType::Reject ? CmReject::Finalizing : CmReject::None;
    m.jobid = 0x12340001;
    m.src_rank = 3;
    m.dst_rank = 17;
    m.token = 0xfeedfacecafebeefull;
    m.generation = 5;
    m.ini_qpn = 0x1234;
    m.tgt_qpn = (type == CmType::Connect || type == CmType::Reject) ? 0 : 0x5678;
    m.port_index = 1;
    return m;
}
}  // namespace

TEST(CmMessage, EveryTypeRoundTrips) {
    for (CmType t : {CmType::Connect, CmType::Accept, CmType::Reject, CmType::Close, CmType::CloseAck, CmType::Leaving,
                     CmType::LeavingAck}) {
        const CmMessage m = sample(t);
        const CmBytes b = encode_cm(m);
        const auto out = decode_cm(b);
        ASSERT_TRUE(out.has_value()) << cm_type_name(t) << ": " << out.error().message();
        EXPECT_EQ(*out, m) << cm_type_name(t);
    }
}

TEST(CmMessage, WrongSizesAreRejected) {
    const CmBytes b = encode_cm(sample(CmType::Connect));
    for (std::size_t n = 0; n < b.size(); ++n) EXPECT_FALSE(decode_cm(std::span(b.data(), n)).has_value()) << n;
    std::vector<std::uint8_t> longer(b.begin(), b.end());
    longer.push_back(0);
    EXPECT_FALSE(decode_cm(longer).has_value());
}

TEST(CmMessage, EachBadFieldIsNamed) {
    auto why = [](auto mutate) {
        CmBytes b = encode_cm(sample(CmType::Accept));
        mutate(b);
        const auto out = decode_cm(b);
        return out ? std::string() : out.error().message();
    };
    EXPECT_NE(why([](CmBytes &b) { b[0] ^= 1; }).find("magic"), std::string::npos);
    EXPECT_NE(why([](CmBytes &b) { b[4] = 9; }).find("version 9"), std::string::npos);
    EXPECT_NE(why([](CmBytes &b) { b[5] = 0; }).find("type"), std::string::npos);
    EXPECT_NE(why([](CmBytes &b) { b[5] = 8; }).find("type"), std::string::npos);
    EXPECT_NE(why([](CmBytes &b) { b[6] = 1; }).find("reason"), std::string::npos);  // a reason on an ACCEPT
    EXPECT_NE(why([](CmBytes &b) { b[47] = 1; }).find("reserved"), std::string::npos);
    EXPECT_NE(why([](CmBytes &b) { std::fill(b.begin() + 24, b.begin() + 32, 0); }).find("token"), std::string::npos);
    EXPECT_NE(why([](CmBytes &b) { std::fill(b.begin() + 32, b.begin() + 36, 0); }).find("generation"),
              std::string::npos);
    EXPECT_NE(why([](CmBytes &b) { b[39] = 1; }).find("INI"), std::string::npos);  // a 25-bit QP number
    EXPECT_NE(why([](CmBytes &b) { std::fill(b.begin() + 40, b.begin() + 44, 0); }).find("TGT"), std::string::npos);
}

TEST(CmMessage, AConnectNamesNoTgtQp) {
    CmMessage m = sample(CmType::Connect);
    m.tgt_qpn = 0x99;
    EXPECT_FALSE(decode_cm(encode_cm(m)).has_value());
}

TEST(CmMessage, RandomBytesNeverCrash) {
    std::mt19937 rng(3);
    for (int i = 0; i < 50000; ++i) {
        CmBytes b = encode_cm(sample(CmType::Close));
        for (int f = 0; f < 1 + static_cast<int>(rng() % 3); ++f) b[rng() % b.size()] = static_cast<std::uint8_t>(rng());
        (void)decode_cm(b);
    }
    SUCCEED();
}
