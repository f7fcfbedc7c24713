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
    if (type == CmType::Accept || type == CmType::Hold || type == CmType::Held || type == CmType::Release)
        m.named_rank = 4;
    if (type == CmType::Probe || type == CmType::ProbeAck) m.ini_qpn = m.tgt_qpn = 0;
    if (type == CmType::Address || type == CmType::AddressAck) {
        m.ini_qpn = m.tgt_qpn = 0;
        m.port_guid = 0x0002c90300a1b2c3ull;
        m.old_lid = 0x11;
        m.new_lid = 0xbfff;
    }
    return m;
}
}  // namespace

TEST(CmMessage, EveryTypeRoundTrips) {
    for (CmType t : {CmType::Connect, CmType::Accept, CmType::Reject, CmType::Close, CmType::CloseAck, CmType::Leaving,
                     CmType::LeavingAck, CmType::Address, CmType::AddressAck, CmType::Hold, CmType::Held,
                     CmType::Release, CmType::Probe, CmType::ProbeAck}) {
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
    EXPECT_NE(why([](CmBytes &b) { b[5] = 15; }).find("type"), std::string::npos);
    EXPECT_NE(why([](CmBytes &b) { b[6] = 1; }).find("reason"), std::string::npos);  // a reason on an ACCEPT
    EXPECT_NE(why([](CmBytes &b) { std::fill(b.begin() + 24, b.begin() + 32, 0); }).find("token"), std::string::npos);
    EXPECT_NE(why([](CmBytes &b) { std::fill(b.begin() + 32, b.begin() + 36, 0); }).find("generation"),
              std::string::npos);
    EXPECT_NE(why([](CmBytes &b) { b[39] = 1; }).find("INI"), std::string::npos);  // a 25-bit QP number
    EXPECT_NE(why([](CmBytes &b) { std::fill(b.begin() + 40, b.begin() + 44, 0); }).find("TGT"), std::string::npos);
}

// ADDRESS and ADDRESS_ACK carry a port identity and two unicast LIDs where the others carry QP numbers.
TEST(CmMessage, AnAddressNamesItsPortAndTwoDifferentUnicastLids) {
    for (CmType t : {CmType::Address, CmType::AddressAck}) {
        const CmBytes good = encode_cm(sample(t));
        EXPECT_EQ(good[36], 0xc3);  // the port GUID, little endian, where the INI QP number is otherwise
        EXPECT_EQ(good[44], 0x11);
        EXPECT_EQ(good[46], 0xff);
        auto why = [&](auto mutate) {
            CmMessage m = sample(t);
            mutate(m);
            const auto out = decode_cm(encode_cm(m));
            return out ? std::string() : out.error().message();
        };
        EXPECT_NE(why([](CmMessage &m) { m.port_guid = 0; }).find("port identity"), std::string::npos);
        EXPECT_NE(why([](CmMessage &m) { m.old_lid = 0; }).find("LIDs"), std::string::npos);
        EXPECT_NE(why([](CmMessage &m) { m.new_lid = 0; }).find("LIDs"), std::string::npos);
        EXPECT_NE(why([](CmMessage &m) { m.new_lid = 0xc000; }).find("LIDs"), std::string::npos);  // multicast
        EXPECT_NE(why([](CmMessage &m) { m.old_lid = 0xffff; }).find("LIDs"), std::string::npos);  // permissive
        EXPECT_NE(why([](CmMessage &m) { m.new_lid = m.old_lid; }).find("LIDs"), std::string::npos);
        EXPECT_NE(why([](CmMessage &m) { m.generation = 0; }).find("generation"), std::string::npos);
        EXPECT_NE(why([](CmMessage &m) { m.token = 0; }).find("token"), std::string::npos);
    }
    // The other types keep their reserved word: an ADDRESS's LID bytes on a CLOSE are malformed.
    CmBytes b = encode_cm(sample(CmType::Close));
    b[46] = 0x22;
    EXPECT_FALSE(decode_cm(b).has_value());
}

// The word after the TGT QP number names a rank on ACCEPT (the holder; none is 0 on the wire), HOLD and HELD (the
// initiator, always); on every other type it is reserved.
TEST(CmMessage, OnlyAcceptHoldAndHeldNameARank) {
    CmMessage accept = sample(CmType::Accept);
    accept.named_rank = kCmNoRank;
    const CmBytes none = encode_cm(accept);
    EXPECT_EQ(none[44] | none[45] | none[46] | none[47], 0);
    ASSERT_TRUE(decode_cm(none).has_value());
    EXPECT_EQ(decode_cm(none)->named_rank, kCmNoRank);
    accept.named_rank = 0;  // rank 0 is a rank
    EXPECT_EQ(decode_cm(encode_cm(accept))->named_rank, 0u);
    for (CmType t : {CmType::Hold, CmType::Held, CmType::Release}) {
        CmMessage m = sample(t);
        m.named_rank = kCmNoRank;
        const auto out = decode_cm(encode_cm(m));
        ASSERT_FALSE(out.has_value()) << cm_type_name(t);
        EXPECT_NE(out.error().message().find("initiator"), std::string::npos);
    }
    for (CmType t :
         {CmType::Connect, CmType::Reject, CmType::Close, CmType::CloseAck, CmType::Leaving, CmType::LeavingAck}) {
        CmBytes b = encode_cm(sample(t));
        b[47] = 1;
        const auto out = decode_cm(b);
        ASSERT_FALSE(out.has_value()) << cm_type_name(t);
        EXPECT_NE(out.error().message().find("reserved"), std::string::npos);
    }
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
        for (int f = 0; f < 1 + static_cast<int>(rng() % 3); ++f)
            b[rng() % b.size()] = static_cast<std::uint8_t>(rng());
        (void)decode_cm(b);
    }
    SUCCEED();
}

// PROBE and PROBE_ACK are about a broken link, not a QP: a QP number or a named rank on one is malformed.
TEST(CmMessage, AProbeNamesNoQp) {
    for (CmType t : {CmType::Probe, CmType::ProbeAck}) {
        for (std::size_t at : {36u, 40u, 44u}) {
            CmBytes b = encode_cm(sample(t));
            b[at] = 7;
            const auto out = decode_cm(b);
            ASSERT_FALSE(out.has_value()) << cm_type_name(t) << " byte " << at;
            EXPECT_NE(out.error().message().find("probe names no QP"), std::string::npos);
        }
        CmMessage m = sample(t);
        m.generation = 0;
        EXPECT_FALSE(decode_cm(encode_cm(m)).has_value());
    }
}
