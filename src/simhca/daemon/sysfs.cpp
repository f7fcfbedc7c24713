// SPDX-License-Identifier: BSD-3-Clause
#include "sysfs.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "../common/limits.hpp"

namespace simhca {

namespace {
bool mkdirs(const std::string &p) {
    std::string cur;
    for (size_t i = 0; i <= p.size(); ++i) {
        if (i == p.size() || p[i] == '/') {
            if (!cur.empty() && ::mkdir(cur.c_str(), 0755) < 0 && errno != EEXIST) return false;
        }
        if (i < p.size()) cur += p[i];
    }
    return true;
}
bool put(const std::string &path, const std::string &text) {
    FILE *f = std::fopen(path.c_str(), "w");
    if (!f) return false;
    std::fputs(text.c_str(), f);
    return std::fclose(f) == 0;
}
std::string guid_text(uint64_t g) {
    char b[32];
    std::snprintf(b, sizeof(b), "%04x:%04x:%04x:%04x", unsigned(g >> 48) & 0xffff, unsigned(g >> 32) & 0xffff,
                  unsigned(g >> 16) & 0xffff, unsigned(g) & 0xffff);
    return b;
}
} // namespace

bool write_port_counters(const std::string &dir, const PortCounters &counters) {
    bool ok = true;
    for (const auto &c : kPortCounters) {
        const std::string path = dir + "/ports/1/hw_counters/" + c.name, tmp = path + ".new";
        ok = put(tmp, std::to_string(counters.*c.field) + "\n") && std::rename(tmp.c_str(), path.c_str()) == 0 && ok;
    }
    return ok;
}

bool write_sysfs(const std::string &dir, uint16_t lid, std::string &err) {
    if (!mkdirs(dir + "/device") || !mkdirs(dir + "/ports/1/hw_counters")) {
        err = "cannot create " + dir + ": " + std::strerror(errno);
        return false;
    }
    // Every CPU is local: the simulated HCA is attached to the whole machine.
    long ncpu = ::sysconf(_SC_NPROCESSORS_CONF);
    std::string mask;
    {
        unsigned words = unsigned((ncpu + 31) / 32);
        for (unsigned w = words; w-- > 0;) {
            long bits = std::min<long>(32, ncpu - long(w) * 32);
            uint32_t v = bits >= 32 ? 0xffffffffu : ((1u << bits) - 1);
            char b[16];
            std::snprintf(b, sizeof(b), "%08x", v);
            if (!mask.empty()) mask += ",";
            mask += b;
        }
    }
    uint64_t guid = limits::node_guid_for_lid(lid);
    char lidtxt[16];
    std::snprintf(lidtxt, sizeof(lidtxt), "0x%x\n", lid);
    bool ok = put(dir + "/device/local_cpus", mask + "\n") && put(dir + "/device/numa_node", "-1\n") &&
              put(dir + "/device/vendor", "0x02c9\n") && put(dir + "/device/device", "0x1017\n") &&
              put(dir + "/board_id", "SIM0000000001\n") && put(dir + "/fw_ver", std::string(limits::kFwVer) + "\n") &&
              put(dir + "/hca_type", "SIMHCA\n") && put(dir + "/hw_rev", "0\n") &&
              put(dir + "/node_type", "1: CA\n") && put(dir + "/node_guid", guid_text(guid) + "\n") &&
              put(dir + "/sys_image_guid", guid_text(guid) + "\n") && put(dir + "/ports/1/lid", lidtxt) &&
              put(dir + "/ports/1/state", "4: ACTIVE\n") && put(dir + "/ports/1/phys_state", "5: LinkUp\n") &&
              put(dir + "/ports/1/link_layer", "InfiniBand\n") && put(dir + "/ports/1/rate", "100 Gb/sec (4X EDR)\n") &&
              write_port_counters(dir, PortCounters{});
    if (!ok) err = "cannot write files in " + dir;
    return ok;
}

bool UverbsFile::create(const std::string &dir, std::string &err) {
    std::string path = dir + "/" + limits::kUverbsName;
    if (!mkdirs(dir)) {
        err = "cannot create " + dir + ": " + std::strerror(errno);
        return false;
    }
    (void)::unlink(path.c_str()); // a crashed daemon's file
    mode_t old = ::umask(0);
    int rc = ::mknod(path.c_str(), S_IFCHR | 0666, makedev(limits::kUverbsMajor, limits::kUverbsMinor));
    ::umask(old);
    if (rc < 0) {
        err = "cannot create the character device " + path + ": " + std::strerror(errno);
        return false;
    }
    path_ = path;
    return true;
}

UverbsFile::~UverbsFile() {
    if (!path_.empty()) (void)::unlink(path_.c_str());
}

} // namespace simhca
