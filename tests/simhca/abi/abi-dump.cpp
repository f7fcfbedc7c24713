// abi-dump LIB: dlopen LIB (a libibverbs.so.1) and print the results of every exported function that
// needs no device, over a range of inputs wider than the valid one (so out-of-range handling is compared
// too). The ABI test runs it on the system library and on ours and diffs the two outputs: the strings and
// rate tables are part of the behaviour programs see (ibv_rc_pingpong prints ibv_wc_status_str, Open MPI
// logs ibv_event_type_str, perftest converts rates).
//
// It also checks the functions that must fail cleanly: called with NULL/garbage they must return the
// documented failure value instead of crashing (the system library would crash on some of these, so that
// part runs only with --ours).
#include <dlfcn.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>

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

} // namespace

int main(int argc, char **argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: abi-dump LIBRARY\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        std::fprintf(stderr, "abi-dump: dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    return dump_pure(lib);
}
