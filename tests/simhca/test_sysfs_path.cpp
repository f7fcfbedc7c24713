// SPDX-License-Identifier: BSD-3-Clause
// ibv_get_sysfs_path(): $SYSFS_PATH when set; else the software HCA's sysfs
// root (the daemon's view, laid out as ROOT/class/infiniband/simhca0), so
// Open MPI's openib finds the device without simhca-run; else /sys.
// And the device's character file (`simhcad --dev-dir DIR`): DIR/uverbs0,
// which rdma-core and UCX look for before they use a device.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

std::string env_or(const char *name, const char *dflt) {
    const char *v = std::getenv(name);
    return v && *v ? v : dflt;
}

// Starts simhcad --node sysfs --sysfs SYSFS_DIR EXTRA... on `instance`, output to `log`; returns its pid.
pid_t spawn_daemon(const std::string &instance, const std::string &sysfs_dir, const std::string &log,
                   const std::vector<std::string> &extra = {}) {
    pid_t pid = ::fork();
    if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        ::setenv("SIMHCA_INSTANCE", instance.c_str(), 1);
        if (std::freopen(log.c_str(), "w", stdout)) ::dup2(1, 2);
        std::string d = env_or("SIMHCAD", "../../src/simhca/simhcad");
        std::vector<std::string> args = {"simhcad", "--node", "sysfs", "--sysfs", sysfs_dir};
        args.insert(args.end(), extra.begin(), extra.end());
        std::vector<char *> argv;
        for (auto &a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv(d.c_str(), argv.data());
        ::_exit(127);
    }
    return pid;
}

// A private simhcad with `--sysfs DIR` (and EXTRA arguments), stopped by pid.
class ScopedDaemon {
public:
    ScopedDaemon(const std::string &instance, const std::string &sysfs_dir, const std::string &log,
                 const std::vector<std::string> &extra = {}) {
        pid_ = spawn_daemon(instance, sysfs_dir, log, extra);
        std::string ctl = env_or("SIMHCA_CTL", "../../src/simhca/simhca-ctl");
        ready_ = pid_ > 0 && std::system(("SIMHCA_INSTANCE=" + instance + " " + ctl + " wait-ready").c_str()) == 0;
    }
    ScopedDaemon(const ScopedDaemon &) = delete;
    ScopedDaemon &operator=(const ScopedDaemon &) = delete;
    ~ScopedDaemon() { stop(); }
    bool ready() const { return ready_; }
    // SIGTERM, then waits; returns the exit status (as waitpid reports it), -1 when already stopped.
    int stop() {
        if (pid_ <= 0) return -1;
        ::kill(pid_, SIGTERM);
        int st = -1;
        ::waitpid(pid_, &st, 0);
        pid_ = -1;
        return st;
    }

private:
    pid_t pid_ = -1;
    bool ready_ = false;
};

// What a fresh process linked with our library gets from ibv_get_sysfs_path().
// `env` is prepended to the command (variable assignments / unset).
std::string sysfs_path_in_new_process(const std::string &env) {
    std::string prog = env_or("SIMHCA_SYSFS_PATH_PROG", "./simhca-sysfs-path");
    FILE *p = ::popen(("env " + env + " " + prog).c_str(), "r");
    if (!p) return "(popen failed)";
    std::string out;
    char buf[512];
    while (std::fgets(buf, sizeof(buf), p)) out += buf;
    int st = ::pclose(p);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return "(failed: " + std::to_string(st) + ")";
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

class SysfsPath : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/simhca-sysfs-XXXXXX";
        ASSERT_NE(::mkdtemp(tmpl), nullptr);
        dir = tmpl;
        instance = "gtest-sysfs-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    }
    void TearDown() override {
        std::error_code ignored;  // a scratch directory: what cannot be removed is left, as rm -rf would
        std::filesystem::remove_all(dir, ignored);
    }
    static inline int counter = 0;
    std::string dir, instance;
};

TEST_F(SysfsPath, UnsetUsesTheDaemonsSysfsRoot) {
    ScopedDaemon d(instance, dir + "/root/class/infiniband/simhca0", dir + "/simhcad.log");
    ASSERT_TRUE(d.ready());
    std::string got = sysfs_path_in_new_process("-u SYSFS_PATH SIMHCA_INSTANCE=" + instance);
    EXPECT_EQ(got, dir + "/root");
    // It is a real sysfs view: what Open MPI's openib checks exists there.
    struct stat st;
    EXPECT_EQ(::stat((got + "/class/infiniband/simhca0/node_guid").c_str(), &st), 0) << got;
}

TEST_F(SysfsPath, EnvironmentWinsWithTrailingSlashesRemoved) {
    ScopedDaemon d(instance, dir + "/root/class/infiniband/simhca0", dir + "/simhcad.log");
    ASSERT_TRUE(d.ready());
    EXPECT_EQ(sysfs_path_in_new_process("SYSFS_PATH=" + dir + "/elsewhere// SIMHCA_INSTANCE=" + instance),
              dir + "/elsewhere");
}

TEST_F(SysfsPath, NoDaemonFallsBackToSys) {
    EXPECT_EQ(sysfs_path_in_new_process("-u SYSFS_PATH SIMHCA_INSTANCE=" + instance + "-nobody"), "/sys");
}

TEST_F(SysfsPath, ViewNotUnderClassInfinibandFallsBackToSys) {
    ScopedDaemon d(instance, dir + "/flat", dir + "/simhcad.log");
    ASSERT_TRUE(d.ready());
    EXPECT_EQ(sysfs_path_in_new_process("-u SYSFS_PATH SIMHCA_INSTANCE=" + instance), "/sys");
}

// The character file exists exactly while the daemon runs, with the kernel's numbers of the first uverbs
// device and mode 0666, under the name the library reports as the device's dev_name (UCX stats
// /dev/infiniband/<dev_name>); a stale file of a daemon that died is replaced. mknod needs CAP_MKNOD.
TEST_F(SysfsPath, DevDirHoldsTheUverbsCharacterDeviceWhileTheDaemonRuns) {
    if (::geteuid() != 0) GTEST_SKIP() << "mknod of a character device needs root";
    std::string devdir = dir + "/dev/infiniband"; // created with its parents
    ASSERT_EQ(std::system(("mkdir -p '" + devdir + "' && echo stale > '" + devdir + "/uverbs0'").c_str()), 0);
    {
        ScopedDaemon d(instance, dir + "/root/class/infiniband/simhca0", dir + "/simhcad.log",
                       {"--dev-dir", devdir});
        ASSERT_TRUE(d.ready());
        ::setenv("SIMHCA_INSTANCE", instance.c_str(), 1);
        int n = 0;
        ibv_device **list = ibv_get_device_list(&n);
        ASSERT_NE(list, nullptr);
        ASSERT_EQ(n, 1);
        std::string path = devdir + "/" + list[0]->dev_name;
        ibv_free_device_list(list);
        struct stat st;
        ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
        EXPECT_TRUE(S_ISCHR(st.st_mode));
        EXPECT_EQ(st.st_mode & 07777, 0666u);
        EXPECT_EQ(major(st.st_rdev), 231u); // IB_UVERBS_MAJOR
        EXPECT_EQ(minor(st.st_rdev), 192u); // IB_UVERBS_BASE_MINOR: uverbs0
        EXPECT_EQ(::access(path.c_str(), R_OK | W_OK), 0);
        int status = d.stop();
        ASSERT_TRUE(WIFEXITED(status)) << status;
        EXPECT_EQ(WEXITSTATUS(status), 0);
        EXPECT_NE(::stat(path.c_str(), &st), 0) << path << " outlived the daemon";
    }
}

// A device directory the daemon cannot create is an error that names it, and no daemon runs.
TEST_F(SysfsPath, DevDirThatCannotBeCreatedStopsTheDaemon) {
    std::string log = dir + "/simhcad.log";
    pid_t pid = spawn_daemon(instance, dir + "/root/class/infiniband/simhca0", log,
                             {"--dev-dir", "/proc/simhca-no-such-dir/infiniband"});
    ASSERT_GT(pid, 0);
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 1);
    std::ifstream f(log);
    std::stringstream text;
    text << f.rdbuf();
    EXPECT_NE(text.str().find("/proc/simhca-no-such-dir/infiniband"), std::string::npos) << text.str();
}

} // namespace
