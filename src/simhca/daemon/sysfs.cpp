// SPDX-License-Identifier: BSD-3-Clause
#include "sysfs.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "../common/limits.hpp"
#include "object_table.hpp"

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
}  // namespace

bool write_port_counters(const std::string &dir, uint32_t port_num, const PortCounters &counters) {
    bool ok = true;
    for (const auto &c : kPortCounters) {
        const std::string path = dir + "/ports/" + std::to_string(port_num) + "/hw_counters/" + c.name,
                          tmp = path + ".new";
        ok = put(tmp, std::to_string(counters.*c.field) + "\n") && std::rename(tmp.c_str(), path.c_str()) == 0 && ok;
    }
    return ok;
}

// The rate file's text for an ibv_port_attr speed / width pair, as the kernel's rate_show() words it.
static std::string rate_text(uint8_t speed, uint8_t width) {
    int lanes = width == 1 ? 1 : width == 2 ? 4 : width == 4 ? 8 : width == 8 ? 12 : width == 16 ? 2 : 1;
    const char *name = "SDR";
    double gbps = 2.5;
    switch (speed) {
        case 2:
            name = "DDR", gbps = 5;
            break;
        case 4:
            name = "QDR", gbps = 10;
            break;
        case 8:
            name = "FDR10", gbps = 10;
            break;
        case 16:
            name = "FDR", gbps = 14.0625;
            break;
        case 32:
            name = "EDR", gbps = 25.78125;
            break;
        case 64:
            name = "HDR", gbps = 50;
            break;
        case 128:
            name = "NDR", gbps = 100;
            break;
        default:
            break;
    }
    // The kernel prints the data rate: EDR 4X is "100 Gb/sec", FDR 4X "56 Gb/sec".
    double rate = speed == 32 ? 25.0 * lanes : speed == 16 ? 14.0 * lanes : gbps * lanes;
    char b[64];
    std::snprintf(b, sizeof(b), "%g Gb/sec (%dX %s)\n", rate, lanes, name);
    return b;
}

bool write_port_files(const std::string &dir, const Port &p) {
    const std::string pd = dir + "/ports/" + std::to_string(p.port_num);
    char lidtxt[16];
    std::snprintf(lidtxt, sizeof(lidtxt), "0x%x\n", p.lid);
    const bool up = p.state == IBV_PORT_ACTIVE;
    uint16_t pfx[4] = {uint16_t(p.subnet_prefix >> 48), uint16_t(p.subnet_prefix >> 32),
                       uint16_t(p.subnet_prefix >> 16), uint16_t(p.subnet_prefix)};
    char gid[64];
    std::snprintf(gid, sizeof(gid), "%04x:%04x:%04x:%04x:%s\n", pfx[0], pfx[1], pfx[2], pfx[3],
                  guid_text(p.port_guid).c_str());
    return put(pd + "/lid", lidtxt) && put(pd + "/state", up ? "4: ACTIVE\n" : "1: DOWN\n") &&
           put(pd + "/phys_state", up ? "5: LinkUp\n" : "3: Disabled\n") && put(pd + "/link_layer", "InfiniBand\n") &&
           put(pd + "/rate", rate_text(p.active_speed, p.active_width)) && put(pd + "/gids/0", gid) &&
           put(pd + "/sm_lid", p.lid ? "0x1\n" : "0x0\n");
}

bool write_sysfs(const std::string &dir, uint64_t guid, const Port *ports, uint32_t nports, std::string &err) {
    if (!mkdirs(dir + "/device")) {
        err = "cannot create " + dir + ": " + std::strerror(errno);
        return false;
    }
    for (uint32_t i = 0; i < nports; ++i)
        if (!mkdirs(dir + "/ports/" + std::to_string(ports[i].port_num) + "/hw_counters") ||
            !mkdirs(dir + "/ports/" + std::to_string(ports[i].port_num) + "/gids")) {
            err = "cannot create the ports of " + dir + ": " + std::strerror(errno);
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
    bool ok = put(dir + "/device/local_cpus", mask + "\n") && put(dir + "/device/numa_node", "-1\n") &&
              put(dir + "/device/vendor", "0x02c9\n") && put(dir + "/device/device", "0x1017\n") &&
              put(dir + "/board_id", "SIM0000000001\n") && put(dir + "/fw_ver", std::string(limits::kFwVer) + "\n") &&
              put(dir + "/hca_type", "SIMHCA\n") && put(dir + "/hw_rev", "0\n") && put(dir + "/node_type", "1: CA\n") &&
              put(dir + "/node_guid", guid_text(guid) + "\n") && put(dir + "/sys_image_guid", guid_text(guid) + "\n");
    for (uint32_t i = 0; ok && i < nports; ++i)
        ok = write_port_files(dir, ports[i]) && write_port_counters(dir, ports[i].port_num, PortCounters{});
    if (!ok) err = "cannot write files in " + dir;
    return ok;
}

bool UverbsFile::create(const std::string &dir, uint32_t index, std::string &err) {
    std::string path = dir + "/uverbs" + std::to_string(index);
    if (!mkdirs(dir)) {
        err = "cannot create " + dir + ": " + std::strerror(errno);
        return false;
    }
    (void)::unlink(path.c_str());  // a crashed daemon's file
    mode_t old = ::umask(0);
    int rc = ::mknod(path.c_str(), S_IFCHR | 0666, makedev(limits::kUverbsMajor, limits::kUverbsMinor + index));
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

}  // namespace simhca
