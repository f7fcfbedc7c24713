// SPDX-License-Identifier: BSD-3-Clause
// The status record: round trip, values that need escaping, and malformed input (every truncation, another
// magic or version, broken lines, numbers out of range, missing keys) refused with a reason and without a crash.
// Later additions of the same version (unknown kinds and keys) are skipped.
#include "src/core/status_record.h"

#include <gtest/gtest.h>

#include <random>

using namespace xrc;

namespace {

StatusRecord sample() {
    StatusRecord r;
    StatusProcess &p = r.process;
    p.pid = 4242;
    p.start_ticks = 123456789;
    p.boot_id = "74bf5c5f-5638-44a9-acd6-f86f4688319a";
    p.host = "nodeB";
    p.uid = 1000;
    p.jobid = 3342204929u;
    p.rank = 5;
    p.local_rank = 1;
    p.local_ranks = 2;
    p.node = 1;
    p.state = "running";
    p.sequence = 17;
    p.written_us = 1796126598876355ull;
    p.interval_s = 10;
    StatusPort port;
    port.device = "mlx5_0";
    port.port = 1;
    port.lid = 7;
    port.xrcd_file = "/tmp/ompi.nodeB.1000/jf.1/1/btl_xrc_xrcd.3342204929.1000.mlx5_0.1";
    port.xrcd_dev = 65024;
    port.xrcd_ino = 1065794;
    port.cm_qpn = 0x56;
    port.srqs = {{256, 0x30, 1024, 1000, 256}, {65536, 0x31, 64, 64, 16}};
    StatusLink l;
    l.node = 0;
    l.host = "nodeA";
    l.state = "connected";
    l.ini_qpn = 0x58;
    l.qp_state = "RTS";
    l.owner = 0;
    l.tgt_qpn = 0x59;
    l.generation = 1;
    l.outstanding = 3;
    l.queued = false;
    port.links.push_back(l);
    StatusLink idle;
    idle.node = 2;
    idle.state = "idle";
    idle.owner = 4;
    idle.generation = 2;
    idle.job = 9;  // another job's node (btl_xrc_other_jobs)
    idle.queued = true;
    port.links.push_back(idle);
    port.tgts.push_back({0x5a, "RTS", 0, 0, "nodeA", 0x57, 1, 0, false});
    port.tgts.push_back({0x5b, "RTS", 5, 1, "nodeB", 0x5c, 0, 7, true});
    port.handles.push_back({0x60, 0x61});
    port.counters = {{"ring_sends", 12}, {"bytes_sent", 1ull << 40}};  // name, value
    r.ports.push_back(port);
    port.device = "mlx5_1";
    port.links.clear();
    r.ports.push_back(port);
    return r;
}

std::string replaced(std::string s, const std::string &from, const std::string &to) {
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    return s;
}

// Keeps the end line's count right after an edit that adds or removes lines.
std::string recount(std::string s) {
    const auto end = s.rfind("end ");
    s.erase(end);
    std::size_t lines = 0;
    for (char c : s) lines += c == '\n';
    return s + "end " + std::to_string(lines) + "\n";
}

std::string decode_error(const std::string &bytes) {
    const auto r = decode_status(bytes);
    return r ? std::string() : r.error().message();
}

}  // namespace

TEST(StatusRecord, RoundTrip) {
    const StatusRecord a = sample();
    const auto b = decode_status(encode_status(a));
    ASSERT_TRUE(b.has_value()) << b.error().message();
    EXPECT_EQ(a, *b);
}

TEST(StatusRecord, StartsWithMagicAndEndsWithLineCount) {
    const std::string bytes = encode_status(sample());
    EXPECT_EQ(bytes.rfind("btl-xrc-status 1\nprocess ", 0), 0u);
    std::size_t lines = 0;
    for (char c : bytes) lines += c == '\n';
    EXPECT_NE(bytes.find("\nend " + std::to_string(lines - 1) + "\n"), std::string::npos);
}

TEST(StatusRecord, ValuesAreEscaped) {
    StatusRecord a = sample();
    a.process.host = "a b=c%d\n\te\x01\xff";
    a.ports[0].xrcd_file = "/dir with spaces/f=1";
    const std::string bytes = encode_status(a);
    EXPECT_EQ(bytes.find("a b"), std::string::npos);
    const auto b = decode_status(bytes);
    ASSERT_TRUE(b.has_value()) << b.error().message();
    EXPECT_EQ(b->process.host, a.process.host);
    EXPECT_EQ(b->ports[0].xrcd_file, a.ports[0].xrcd_file);
}

TEST(StatusRecord, Unescape) {
    std::string v;
    EXPECT_TRUE(status_unescape("a%20b", v));
    EXPECT_EQ(v, "a b");
    EXPECT_FALSE(status_unescape("a%2", v));
    EXPECT_FALSE(status_unescape("a%", v));
    EXPECT_FALSE(status_unescape("a%zz", v));
    EXPECT_FALSE(status_unescape("a b", v));
    EXPECT_TRUE(status_unescape("", v));
    EXPECT_EQ(v, "");
}

TEST(StatusRecord, EveryTruncationIsRefused) {
    const std::string bytes = encode_status(sample());
    for (std::size_t n = 0; n < bytes.size(); ++n)
        EXPECT_NE(decode_error(bytes.substr(0, n)), "") << "accepted a record cut at " << n;
}

TEST(StatusRecord, ForeignFilesAreNamed) {
    EXPECT_NE(decode_error("").find("not a btl-xrc status record"), std::string::npos);
    EXPECT_NE(decode_error("#!/bin/sh\necho hi\n").find("not a btl-xrc status record"), std::string::npos);
    EXPECT_NE(decode_error(std::string("btl-xrc-status 1\0\n", 18)).find("NUL"), std::string::npos);
    std::string bytes = encode_status(sample());
    EXPECT_NE(decode_error(replaced(bytes, "btl-xrc-status 1", "btl-xrc-status 2")).find("version 2"),
              std::string::npos);
}

TEST(StatusRecord, EndLineMustCountTheLines) {
    const std::string bytes = encode_status(sample());
    // A line lost in the middle (with the end line kept) is noticed.
    const auto first_srq = bytes.find("\nsrq ");
    const auto next = bytes.find('\n', first_srq + 1);
    const std::string lost = bytes.substr(0, first_srq) + bytes.substr(next);
    EXPECT_NE(decode_error(lost).find("end line counts"), std::string::npos);
    EXPECT_NE(decode_error(bytes + "srq class=1\n"), "");
    EXPECT_NE(decode_error(replaced(bytes, "\nend ", "\nend x")), "");
}

TEST(StatusRecord, MalformedLinesAreRefusedWithTheirLine) {
    const std::string bytes = encode_status(sample());
    const std::pair<std::string, std::string> cases[] = {
        {" pid=4242 ", " pid=42x42 "},            // not a number
        {" pid=4242 ", " pid=-1 "},                // no sign
        {" pid=4242 ", " pid=99999999999 "},       // beyond 32 bits
        {" pid=4242 ", " pid=0 "},                 // no process has it
        {" pid=4242 ", "  pid=4242 "},             // an empty field
        {" pid=4242 ", " pid 4242 "},              // not key=value
        {" pid=4242 ", " pid=4242 pid=4242 "},     // a key twice
        {" uid=1000", " uid=1000 x$y=1"},          // a key with odd characters
        {" cm_qpn=86", " cm_qpn=16777216"},        // QPNs have 24 bits
        {" cm_qpn=86", ""},                        // a key missing
        {"state=connected", "state=con%20nected"},  // a state is a name
        {"host=nodeA", "host=node%zzA"},           // a broken escape
        {"queued=0", "queued=2"},                  // a flag
        {"posted=1000", "posted=1025"},            // more posted than buffers
        {" lid=7", " lid=65536"},                  // LIDs have 16 bits
    };
    for (const auto &[from, to] : cases) {
        const std::string why = decode_error(replaced(bytes, from, to));
        EXPECT_NE(why, "") << "accepted '" << to << "'";
        EXPECT_EQ(why.rfind("line ", 0), 0u) << why;
    }
}

TEST(StatusRecord, StructureIsChecked) {
    const std::string bytes = encode_status(sample());
    const auto process_end = bytes.find('\n', bytes.find("\nprocess ") + 1);
    const std::string process_line = bytes.substr(bytes.find("\nprocess ") + 1, process_end - bytes.find("\nprocess "));
    // The process line first, and once.
    EXPECT_NE(decode_error(recount(replaced(bytes, "\nprocess ", "\nport device=x port=1 lid=1 xrcd= xrcd_dev=1 "
                                                                  "xrcd_ino=1 cm_qpn=1\nprocess "))),
              "");
    EXPECT_NE(decode_error(recount(bytes.substr(0, bytes.rfind("end ")) + process_line + "end 0\n")), "");
    // Items of a port come after a port line.
    EXPECT_NE(decode_error(recount(replaced(bytes, "\nport ", "\nhandle qpn=1 ini_qpn=2\nport "))).find("before any port"),
              std::string::npos);
}

TEST(StatusRecord, LaterAdditionsAreSkipped) {
    const std::string bytes = encode_status(sample());
    std::string later = replaced(bytes, " cm_qpn=86", " cm_qpn=86 future_key=whatever");
    later = recount(replaced(later, "\nsrq ", "\nfuture_kind a=1 b=2\nsrq "));
    const auto r = decode_status(later);
    ASSERT_TRUE(r.has_value()) << r.error().message();
    EXPECT_EQ(*r, sample());
}

TEST(StatusRecord, RandomDamageNeverCrashes) {
    const std::string bytes = encode_status(sample());
    std::mt19937 rng(7);
    for (int round = 0; round < 3000; ++round) {
        std::string damaged = bytes;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < flips; ++k) damaged[rng() % damaged.size()] = static_cast<char>(rng() & 0xff);
        (void)decode_status(damaged);  // a reason or a record; never a crash (ASan build checks the reads)
    }
}
