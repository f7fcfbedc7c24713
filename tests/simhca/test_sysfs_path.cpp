// ibv_get_sysfs_path(): $SYSFS_PATH when set; else the software HCA's sysfs
// root (the daemon's view, laid out as ROOT/class/infiniband/simhca0), so
// Open MPI's openib finds the device without simhca-run; else /sys.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

std::string env_or(const char *name, const char *dflt) {
    const char *v = std::getenv(name);
    return v && *v ? v : dflt;
}

// A private simhcad with `--sysfs DIR`, stopped by pid.
class ScopedDaemon {
public:
    ScopedDaemon(const std::string &instance, const std::string &sysfs_dir, const std::string &log) {
        pid_ = ::fork();
        if (pid_ == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGTERM);
            ::setenv("SIMHCA_INSTANCE", instance.c_str(), 1);
            if (std::freopen(log.c_str(), "w", stdout)) ::dup2(1, 2);
            std::string d = env_or("SIMHCAD", "../../src/simhca/simhcad");
            ::execl(d.c_str(), "simhcad", "--node", "sysfs", "--sysfs", sysfs_dir.c_str(), (char *)nullptr);
            ::_exit(127);
        }
        std::string ctl = env_or("SIMHCA_CTL", "../../src/simhca/simhca-ctl");
        ready_ = pid_ > 0 && std::system(("SIMHCA_INSTANCE=" + instance + " " + ctl + " wait-ready").c_str()) == 0;
    }
    ScopedDaemon(const ScopedDaemon &) = delete;
    ScopedDaemon &operator=(const ScopedDaemon &) = delete;
    ~ScopedDaemon() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        ::waitpid(pid_, nullptr, 0);
    }
    bool ready() const { return ready_; }

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
    void TearDown() override { std::system(("rm -rf '" + dir + "'").c_str()); }
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

} // namespace
