// SPDX-License-Identifier: BSD-3-Clause
// The status record's file: replaced atomically (no temporary file left), never through a symbolic link, read
// only from a regular file of bounded size; the process identity that tells a live record from a stale one; and
// when records are rewritten (StatusSchedule).
#include "src/core/process_identity.h"
#include "src/core/status_file.h"
#include "src/core/status_schedule.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

using namespace xrc;

namespace {

class TempDir {
public:
    TempDir() {
        char pattern[] = "/tmp/test_status_file.XXXXXX";
        path_ = mkdtemp(pattern);
    }
    ~TempDir() {
        for (const auto &name : entries()) (void)unlink((path_ + "/" + name).c_str());
        (void)rmdir(path_.c_str());
    }
    const std::string &path() const { return path_; }
    std::vector<std::string> entries() const {
        std::vector<std::string> names;
        if (DIR *d = opendir(path_.c_str())) {
            while (const dirent *e = readdir(d))
                if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
            closedir(d);
        }
        return names;
    }

private:
    std::string path_;
};

}  // namespace

TEST(StatusFile, Names) {
    EXPECT_EQ(status_file_name("3342204929.0", 2), "btl_xrc_status.3342204929.0.2");
    EXPECT_TRUE(is_status_file_name("btl_xrc_status.1.0.2"));
    EXPECT_FALSE(is_status_file_name(".btl_xrc_status.1.0.2.tmp"));
    EXPECT_FALSE(is_status_file_name("btl_xrc_status."));
    EXPECT_FALSE(is_status_file_name("btl_xrc_xrcd.1.0.mlx5_0.1"));
}

TEST(StatusFile, ReplaceAndRead) {
    TempDir dir;
    const std::string path = dir.path() + "/btl_xrc_status.1.0.0";
    ASSERT_TRUE(replace_file(path, "first").has_value());
    ASSERT_TRUE(replace_file(path, "second, longer").has_value());
    const auto bytes = read_regular_file(path, 1024);
    ASSERT_TRUE(bytes.has_value()) << bytes.error().message();
    EXPECT_EQ(*bytes, "second, longer");
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"btl_xrc_status.1.0.0"});  // no temporary file left
    struct stat st{};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(StatusFile, NoWriteThroughALink) {
    TempDir dir;
    const std::string target = dir.path() + "/elsewhere";
    std::ofstream(target) << "keep";
    const std::string path = dir.path() + "/btl_xrc_status.1.0.0";
    ASSERT_EQ(symlink(target.c_str(), (dir.path() + "/.btl_xrc_status.1.0.0.tmp").c_str()), 0);
    EXPECT_FALSE(replace_file(path, "planted").has_value());
    const auto bytes = read_regular_file(target, 1024);
    ASSERT_TRUE(bytes.has_value()) << bytes.error().message();
    EXPECT_EQ(*bytes, "keep");
}

TEST(StatusFile, ReadRefusesLinksFifosAndLargeFiles) {
    TempDir dir;
    const std::string file = dir.path() + "/big";
    std::ofstream(file) << std::string(100, 'x');
    // The complaint about `path`, empty when it was read.
    auto complaint = [](const std::string &path, std::size_t max) {
        const auto bytes = read_regular_file(path, max);
        return bytes ? std::string() : bytes.error().message();
    };
    EXPECT_NE(complaint(file, 99).find("too large"), std::string::npos);
    const auto whole = read_regular_file(file, 100);
    ASSERT_TRUE(whole.has_value()) << whole.error().message();
    EXPECT_EQ(whole->size(), 100u);
    const std::string link = dir.path() + "/link";
    ASSERT_EQ(symlink(file.c_str(), link.c_str()), 0);
    EXPECT_NE(complaint(link, 1024).find("symbolic link"), std::string::npos);
    const std::string fifo = dir.path() + "/fifo";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    EXPECT_NE(complaint(fifo, 1024).find("not a regular file"), std::string::npos);
    const auto none = read_regular_file(dir.path() + "/none", 1024);
    ASSERT_FALSE(none.has_value());
    EXPECT_EQ(none.error().kind(), ErrorKind::gone);
}

TEST(ProcessIdentity, StartTimeOfStatLines) {
    // Field 22 after a command name with spaces and parentheses.
    const std::string stat =
        "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000000 100 18446744073709551615";
    EXPECT_EQ(start_ticks_of_stat(stat), 987654u);
    EXPECT_FALSE(start_ticks_of_stat("1234 (x) S 1 2 3").has_value());
    EXPECT_FALSE(start_ticks_of_stat("no parenthesis").has_value());
    EXPECT_FALSE(start_ticks_of_stat("1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 12z 1").has_value());
}

TEST(ProcessIdentity, ThisProcess) {
    const auto mine = process_start_ticks(getpid());
    ASSERT_TRUE(mine.has_value());
    EXPECT_EQ(process_start_ticks(getpid()), mine);
    EXPECT_FALSE(kernel_boot_id().empty());
}

TEST(StatusSchedule, ChangesAreWrittenAtOnceWithinTheBudget) {
    StatusSchedule s(10'000'000, 0);
    EXPECT_FALSE(s.due(1));
    s.changed();
    EXPECT_TRUE(s.due(2));
    s.wrote(2, 50'000);
    EXPECT_FALSE(s.due(3));
    // A small job's events (a few dozen writes of tens of microseconds) never wait.
    for (int i = 0; i < 100; ++i) {
        s.changed();
        ASSERT_TRUE(s.due(4 + i));
        s.wrote(4 + i, 50'000);
    }
}

TEST(StatusSchedule, RefreshedEveryInterval) {
    StatusSchedule s(10'000'000, 0);
    EXPECT_FALSE(s.due(9'999'999));
    EXPECT_TRUE(s.due(10'000'000));
    s.wrote(10'000'000, 1000);
    EXPECT_FALSE(s.due(19'999'999));
    EXPECT_TRUE(s.due(20'000'000));
    StatusSchedule never(0, 0);
    EXPECT_FALSE(never.due(1'000'000'000'000));
}

TEST(StatusSchedule, ExpensiveWritesGetAtMostTheirShare) {
    StatusSchedule s(0, 0);
    std::uint64_t now = 0, spent = 0;
    int writes = 0;
    // Changes on every poll, 1 ms apart, each write costing 5 ms of CPU: after the burst, 1% of the time.
    for (int i = 0; i < 100'000; ++i, now += 1000) {
        s.changed();
        if (!s.due(now)) continue;
        s.wrote(now, 5'000'000);
        spent += 5'000'000;
        ++writes;
    }
    EXPECT_TRUE(s.pending() || writes > 0);
    const double elapsed_ns = double(now) * 1000;
    EXPECT_LE(double(spent), StatusSchedule::kBurstNs + 5'000'000 + elapsed_ns / StatusSchedule::kShare);
    EXPECT_GT(writes, 150);  // 100 s: about 200 writes of 5 ms fit in 1%
}
