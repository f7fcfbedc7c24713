// SPDX-License-Identifier: BSD-3-Clause
// The status record's writer: what it names the process, numbered writes, a busy data path that leaves the write
// due, and a record that cannot be written stopping the writing.
#include "src/core/status_file.h"
#include "src/core/status_writer.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

class TempDir {
public:
    TempDir() {
        char pattern[] = "/tmp/test_status_writer.XXXXXX";
        path_ = mkdtemp(pattern);
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    const std::string &path() const { return path_; }

private:
    std::string path_;
};

xrc::JobShape job() {
    xrc::JobShape job;
    job.jobid = 5;
    job.my_rank = 3;
    job.local_index = 1;
    job.local_ranks = 2;
    job.my_node_id = xrc::NodeId{0x80001234u};
    return job;
}

xrc::StatusRecord read_record(const std::string &path) {
    const auto bytes = xrc::read_regular_file(path, 1 << 20);
    EXPECT_TRUE(bytes.has_value());
    if (!bytes) return {};
    const auto record = xrc::decode_status(*bytes);
    EXPECT_TRUE(record.has_value()) << record.error().message();
    return record ? *record : xrc::StatusRecord{};
}

struct Held {
    bool held;
    explicit operator bool() const { return held; }
};

}  // namespace

TEST(StatusWriter, NamesThisProcessFromTheJob) {
    const xrc::StatusProcess p = xrc::StatusWriter::this_process(job(), "nodeA", 10);
    EXPECT_EQ(p.pid, static_cast<std::uint32_t>(getpid()));
    EXPECT_NE(p.start_ticks, 0u);
    EXPECT_EQ(p.uid, static_cast<std::uint32_t>(getuid()));
    EXPECT_EQ(p.host, "nodeA");
    EXPECT_EQ(p.jobid, 5u);
    EXPECT_EQ(p.rank, 3u);
    EXPECT_EQ(p.local_rank, 1u);
    EXPECT_EQ(p.local_ranks, 2u);
    EXPECT_EQ(p.node, 0x80001234u);
    EXPECT_EQ(p.interval_s, 10u);
}

TEST(StatusWriter, WritesNumberedRecordsWhenTheLockIsHeld) {
    TempDir dir;
    const std::string path = dir.path() + "/" + xrc::status_file_name("5.0", 3);
    xrc::StatusWriter writer(path, xrc::StatusWriter::this_process(job(), "nodeA", 10), 10000000, 0,
                             [](std::uint32_t) { return std::string("peer"); });
    EXPECT_EQ(writer.write(1, [] { return Held{true}; }), xrc::StatusWriter::Written::written);
    xrc::StatusRecord record = read_record(path);
    EXPECT_EQ(record.process.sequence, 1u);
    EXPECT_EQ(record.process.state, "running");
    EXPECT_EQ(record.process.host, "nodeA");
    EXPECT_TRUE(record.ports.empty());
    // Another thread holds the data path: nothing written, and the refresh stays due.
    writer.changed();
    EXPECT_TRUE(writer.due(2));
    EXPECT_EQ(writer.write(2, [] { return Held{false}; }), xrc::StatusWriter::Written::busy);
    EXPECT_EQ(read_record(path).process.sequence, 1u);
    EXPECT_TRUE(writer.due(3));
    EXPECT_EQ(writer.write(3, [] { return Held{true}; }), xrc::StatusWriter::Written::written);
    EXPECT_EQ(read_record(path).process.sequence, 2u);
    EXPECT_FALSE(writer.due(4));
    EXPECT_TRUE(writer.due(3 + 10000000));  // the interval's refresh
}

TEST(StatusWriter, ARecordThatCannotBeWrittenStopsTheWriting) {
    xrc::StatusWriter writer("/nonexistent-dir/record", xrc::StatusWriter::this_process(job(), "nodeA", 0), 0, 0,
                             [](std::uint32_t) { return std::string(); });
    EXPECT_FALSE(writer.failed());
    EXPECT_EQ(writer.write(1, [] { return Held{true}; }), xrc::StatusWriter::Written::failed);
    EXPECT_TRUE(writer.failed());
    EXPECT_NE(writer.error().find("/nonexistent-dir"), std::string::npos) << writer.error();
}

TEST(StatusWriter, RemovingTheLastPortLeavesNone) {
    xrc::StatusWriter writer("/tmp/unused", xrc::StatusWriter::this_process(job(), "nodeA", 0), 0, 0,
                             [](std::uint32_t) { return std::string(); });
    const auto *one = reinterpret_cast<const xrc::PortTransport *>(0x1000);
    const auto *two = reinterpret_cast<const xrc::PortTransport *>(0x2000);
    const xrc::Counters counters{};
    const bool finalizing = false;
    writer.add({one, &counters, &finalizing});
    writer.add({two, &counters, &finalizing});
    EXPECT_TRUE(writer.remove(one));
    EXPECT_FALSE(writer.remove(two));
}
