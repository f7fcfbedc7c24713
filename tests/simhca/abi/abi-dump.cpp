// SPDX-License-Identifier: BSD-3-Clause
// abi-dump LIB: dlopen LIB (a libibverbs.so.1) and print the results of every exported function that
// needs no device, over a range of inputs wider than the valid one (so out-of-range handling is compared
// too). The ABI test runs it on the system library and on ours and diffs the two outputs: the strings and
// rate tables are part of the behaviour programs see (ibv_rc_pingpong prints ibv_wc_status_str, Open MPI
// logs ibv_event_type_str, perftest converts rates).
//
// Also compared: the kernel-struct copies (ibv_copy_*_from_kern, fed a byte pattern), ibv_read_sysfs_file
// on small files of every size class.
//
// abi-dump --ours LIB instead checks what only our library promises: the compat (@IBVERBS_1.0) entry points
// and the IBVERBS_PRIVATE_34 stubs fail cleanly (the documented failure value, errno EOPNOTSUPP), the no-op
// ones return, and fork support says IBV_FORK_UNNEEDED. Exit status 0 = all good, 1 = a check failed.
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

#include <dlfcn.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>

namespace {

void *must_sym(void *lib, const char *name, const char *version = nullptr)
{
    void *p = version ? dlvsym(lib, name, version) : dlsym(lib, name);
    if (!p) {
        std::fprintf(stderr, "abi-dump: missing %s%s%s: %s\n", name, version ? "@" : "", version ? version : "",
                     dlerror());
        std::exit(2);
    }
    return p;
}

const char *show(const char *s) { return s ? s : "(null)"; }

int dump_pure(void *lib)
{
    using str_fn = const char *(*)(int);
    using int_fn = int (*)(int);
    const struct { const char *name; int lo, hi; } strs[] = {
        {"ibv_wc_status_str", -2, 40}, {"ibv_node_type_str", -2, 12},
        {"ibv_port_state_str", -2, 10}, {"ibv_event_type_str", -2, 30},
    };
    for (const auto &s : strs) {
        auto fn = reinterpret_cast<str_fn>(must_sym(lib, s.name));
        for (int i = s.lo; i <= s.hi; ++i)
            std::printf("%s(%d) = %s\n", s.name, i, show(fn(i)));
    }
    const struct { const char *name; int lo, hi, step; } ints[] = {
        {"ibv_rate_to_mult", -2, 30, 1}, {"ibv_rate_to_mbps", -2, 30, 1},
        {"mult_to_ibv_rate", -2, 600, 1}, {"mbps_to_ibv_rate", -2500, 1300000, 2500},
    };
    for (const auto &s : ints) {
        auto fn = reinterpret_cast<int_fn>(must_sym(lib, s.name));
        for (int i = s.lo; i <= s.hi; i += s.step)
            std::printf("%s(%d) = %d\n", s.name, i, fn(i));
    }
    // Values that are not multiples of 2500 but are exact rates (14, 28, 56 ... Gb/s lanes).
    auto mbps = reinterpret_cast<int_fn>(must_sym(lib, "mbps_to_ibv_rate"));
    for (int v : {14062, 14000, 28125, 56250, 112500, 168750, 1, 2499, 2501, 25781})
        std::printf("mbps_to_ibv_rate(%d) = %d\n", v, mbps(v));
    auto sysfs = reinterpret_cast<const char *(*)()>(must_sym(lib, "ibv_get_sysfs_path"));
    std::printf("ibv_get_sysfs_path() = %s\n", show(sysfs()));
    return 0;
}

// Hex of an object, so two libraries' copies can be diffed byte for byte (padding included: both start
// from the same fill).
template <typename T>
void hex(const char *label, const T &obj)
{
    const auto *p = reinterpret_cast<const unsigned char *>(&obj);
    std::printf("%s =", label);
    for (std::size_t i = 0; i < sizeof obj; ++i)
        std::printf("%s%02x", i % 32 ? "" : "\n  ", p[i]);
    std::printf("\n");
}

template <typename T>
void pattern(T &obj, unsigned seed)
{
    auto *p = reinterpret_cast<unsigned char *>(&obj);
    for (std::size_t i = 0; i < sizeof obj; ++i)
        p[i] = static_cast<unsigned char>(seed + i * 7);
}

void dump_copies(void *lib)
{
    ib_uverbs_qp_attr kqp;
    pattern(kqp, 1);
    ibv_qp_attr qp;
    std::memset(&qp, 0xAA, sizeof qp);
    reinterpret_cast<void (*)(ibv_qp_attr *, ib_uverbs_qp_attr *)>(
        must_sym(lib, "ibv_copy_qp_attr_from_kern"))(&qp, &kqp);
    hex("ibv_copy_qp_attr_from_kern", qp);

    ib_uverbs_ah_attr kah;
    pattern(kah, 3);
    ibv_ah_attr ah;
    std::memset(&ah, 0xAA, sizeof ah);
    reinterpret_cast<void (*)(ibv_ah_attr *, ib_uverbs_ah_attr *)>(
        must_sym(lib, "ibv_copy_ah_attr_from_kern"))(&ah, &kah);
    hex("ibv_copy_ah_attr_from_kern", ah);

    ib_user_path_rec kpath;
    pattern(kpath, 5);
    ibv_sa_path_rec path;
    std::memset(&path, 0xAA, sizeof path);
    reinterpret_cast<void (*)(ibv_sa_path_rec *, ib_user_path_rec *)>(
        must_sym(lib, "ibv_copy_path_rec_from_kern"))(&path, &kpath);
    hex("ibv_copy_path_rec_from_kern", path);

    pattern(path, 9);
    std::memset(&kpath, 0xAA, sizeof kpath);
    reinterpret_cast<void (*)(ib_user_path_rec *, ibv_sa_path_rec *)>(
        must_sym(lib, "ibv_copy_path_rec_to_kern"))(&kpath, &path);
    hex("ibv_copy_path_rec_to_kern", kpath);
}

// ibv_read_sysfs_file on files with and without a trailing newline, empty, and missing, into buffers smaller
// than, equal to and larger than the contents.
void dump_read_sysfs(void *lib)
{
    auto read_file = reinterpret_cast<int (*)(const char *, const char *, char *, size_t)>(
        must_sym(lib, "ibv_read_sysfs_file"));
    char dir[] = "/tmp/abi-dump.XXXXXX";
    if (!mkdtemp(dir)) {
        std::perror("mkdtemp");
        std::exit(2);
    }
    const struct { const char *name, *text; } files[] = {{"nl", "hello\n"}, {"plain", "hello"}, {"empty", ""}};
    for (const auto &f : files) {
        std::string path = std::string(dir) + "/" + f.name;
        FILE *fp = std::fopen(path.c_str(), "w");
        std::fputs(f.text, fp);
        std::fclose(fp);
    }
    for (const char *name : {"nl", "plain", "empty", "missing"}) {
        for (size_t size : {3, 5, 6, 7, 20}) {
            char buf[32];
            std::memset(buf, 'X', sizeof buf);
            errno = 0;
            int r = read_file(dir, name, buf, size);
            int err = r < 0 && errno == ENOENT ? ENOENT : 0; // the errno worth comparing
            std::printf("ibv_read_sysfs_file(%s, %zu) = %d errno=%d buf=", name, size, r, err);
            for (size_t i = 0; i < size; ++i)
                std::printf("%c", buf[i] ? buf[i] : '0');
            std::printf("\n");
        }
    }
    for (const auto &f : files)
        unlink((std::string(dir) + "/" + f.name).c_str());
    rmdir(dir);
}

// --- checks only our library promises ----------------------------------------------------------------
int failures = 0;

void expect(bool ok, const char *what)
{
    std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok)
        ++failures;
}

int check_ours(void *lib)
{
    // Compat entry points: 1.0 ABI, fail cleanly without touching their (foreign-layout) arguments.
    errno = 0;
    int num = 42;
    auto get_list_10 = reinterpret_cast<void **(*)(int *)>(must_sym(lib, "ibv_get_device_list", "IBVERBS_1.0"));
    expect(!get_list_10(&num) && errno == EOPNOTSUPP && num == 0,
           "ibv_get_device_list@IBVERBS_1.0 -> NULL, num 0, errno EOPNOTSUPP");
    auto open_10 = reinterpret_cast<void *(*)(void *)>(must_sym(lib, "ibv_open_device", "IBVERBS_1.0"));
    errno = 0;
    expect(!open_10(reinterpret_cast<void *>(0x1)) && errno == EOPNOTSUPP, "ibv_open_device@IBVERBS_1.0 -> NULL");
    auto query_port_10 = reinterpret_cast<int (*)(void *, uint8_t, void *)>(
        must_sym(lib, "ibv_query_port", "IBVERBS_1.0"));
    expect(query_port_10(nullptr, 1, nullptr) == EOPNOTSUPP, "ibv_query_port@IBVERBS_1.0 -> EOPNOTSUPP");
    auto query_gid_10 = reinterpret_cast<int (*)(void *, uint8_t, int, void *)>(
        must_sym(lib, "ibv_query_gid", "IBVERBS_1.0"));
    expect(query_gid_10(nullptr, 1, 0, nullptr) == -1, "ibv_query_gid@IBVERBS_1.0 -> -1");
    reinterpret_cast<void (*)(void *)>(must_sym(lib, "ibv_free_device_list", "IBVERBS_1.0"))(nullptr);
    reinterpret_cast<void (*)(void *, unsigned)>(must_sym(lib, "ibv_ack_cq_events", "IBVERBS_1.0"))(nullptr, 1);
    reinterpret_cast<void (*)(const char *, void *)>(must_sym(lib, "ibv_register_driver", "IBVERBS_1.1"))(
        "old", nullptr);
    expect(true, "void compat entry points return");

    // Driver-facing ABI: a provider's constructor registers (no-op); kernel commands fail.
    reinterpret_cast<void (*)(const void *)>(must_sym(lib, "verbs_register_driver_34"))(nullptr);
    errno = 0;
    auto init_ctx = reinterpret_cast<void *(*)(void *, int, size_t, void *, uint32_t)>(
        must_sym(lib, "_verbs_init_and_alloc_context"));
    expect(!init_ctx(nullptr, -1, 64, nullptr, 0) && errno == EOPNOTSUPP, "_verbs_init_and_alloc_context -> NULL");
    auto cmd_pd = reinterpret_cast<int (*)(void *, void *, void *, size_t, void *, size_t)>(
        must_sym(lib, "ibv_cmd_alloc_pd"));
    expect(cmd_pd(nullptr, nullptr, nullptr, 0, nullptr, 0) == EOPNOTSUPP, "ibv_cmd_alloc_pd -> EOPNOTSUPP");
    auto cmd_poll = reinterpret_cast<int (*)(void *, int, void *)>(must_sym(lib, "ibv_cmd_poll_cq"));
    expect(cmd_poll(nullptr, 1, nullptr) == -1 && errno == EOPNOTSUPP, "ibv_cmd_poll_cq -> -1/EOPNOTSUPP");
    ibv_send_wr wr{};
    ibv_send_wr *bad = nullptr;
    auto cmd_post = reinterpret_cast<int (*)(void *, ibv_send_wr *, ibv_send_wr **)>(
        must_sym(lib, "ibv_cmd_post_send"));
    expect(cmd_post(nullptr, &wr, &bad) == EOPNOTSUPP && bad == &wr, "ibv_cmd_post_send -> EOPNOTSUPP, bad_wr");
    expect(dlsym(lib, "verbs_allow_disassociate_destroy") != nullptr, "verbs_allow_disassociate_destroy exists");

    // Fork: the software HCA needs no madvise; both calls say so.
    auto fork_init = reinterpret_cast<int (*)()>(must_sym(lib, "ibv_fork_init"));
    auto fork_status = reinterpret_cast<int (*)()>(must_sym(lib, "ibv_is_fork_initialized"));
    expect(fork_init() == 0 && fork_status() == IBV_FORK_UNNEEDED, "ibv_fork_init 0, IBV_FORK_UNNEEDED");

    uint8_t mac[6];
    uint16_t vid;
    ibv_ah_attr ah{};
    auto resolve = reinterpret_cast<int (*)(void *, ibv_ah_attr *, uint8_t *, uint16_t *)>(
        must_sym(lib, "ibv_resolve_eth_l2_from_gid"));
    errno = 0;
    expect(resolve(nullptr, &ah, mac, &vid) == -1 && errno == EOPNOTSUPP, "ibv_resolve_eth_l2_from_gid -> -1");
    // Without IBV_WC_GRH our ibv_init_ah_from_wc uses only the completion (rdma-core 44 queries the port
    // first, so this is not compared with it): the reply goes to the sender's LID.
    ibv_wc wc{};
    wc.slid = 0x1234;
    wc.sl = 5;
    wc.dlid_path_bits = 3;
    std::memset(&ah, 0xAA, sizeof ah);
    auto init_ah = reinterpret_cast<int (*)(ibv_context *, uint8_t, ibv_wc *, ibv_grh *, ibv_ah_attr *)>(
        must_sym(lib, "ibv_init_ah_from_wc"));
    expect(init_ah(nullptr, 1, &wc, nullptr, &ah) == 0 && ah.dlid == 0x1234 && ah.sl == 5 &&
               ah.src_path_bits == 3 && ah.port_num == 1 && !ah.is_global,
           "ibv_init_ah_from_wc without GRH: dlid/sl/path bits/port from the completion");
    return failures ? 1 : 0;
}

} // namespace

int main(int argc, char **argv)
{
    bool ours = argc == 3 && std::strcmp(argv[1], "--ours") == 0;
    if (argc != 2 && !ours) {
        std::fprintf(stderr, "usage: abi-dump [--ours] LIBRARY\n");
        return 2;
    }
    const char *path = argv[argc - 1];
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        std::fprintf(stderr, "abi-dump: dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    if (ours)
        return check_ours(lib);
    dump_pure(lib);
    dump_copies(lib);
    dump_read_sysfs(lib);
    return 0;
}
