// SPDX-License-Identifier: BSD-3-Clause
// simhcad: the per-node software HCA daemon.
//   simhcad --node NAME [--fabric FILE] [--devices M] [--ports K] [--sysfs DIR] [--dev-dir DIR]
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include <sched.h>
#include <sys/resource.h>

#include "../common/limits.hpp"
#include "../common/socket_io.hpp"
#include "device.hpp"
#include "fabric.hpp"
#include "server.hpp"
#include "sysfs.hpp"

using namespace simhca;

static void usage() {
    std::fprintf(stderr,
                 "usage: simhcad --node NAME [--fabric FILE] [--devices M] [--ports K] [--sysfs DIR] [--dev-dir DIR]\n"
                 "               [--no-realtime]\n"
                 "Runs the software HCA of one (simulated) node in the foreground.\n"
                 "--devices M, --ports K: serve M devices simhca0..simhca<M-1> of K ports each (1..8, default 1\n"
                 "  and 1). Rail r = device * K + port is a fabric of its own (subnet prefix fe80::<r-1>): it reaches\n"
                 "  rail r of other nodes only. LIDs: the fabric file's list for the node (lid L1,L2,...: rail r\n"
                 "  takes the r-th, a rail without one is DOWN); without a fabric file rail r has LID r.\n"
                 "--sysfs DIR: device 0's sysfs directory, ROOT/class/infiniband/simhca0 (the others next to it).\n"
                 "--dev-dir DIR: create the device files DIR/uverbsN (a node's /dev/infiniband) while it runs.\n"
                 "Listens on the abstract socket @simhca[.$SIMHCA_INSTANCE].\n");
}

int main(int argc, char **argv) {
    DeviceConfig cfg;
    std::string fabric, dev_dir;
    bool have_node = false;
    bool realtime = true;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                usage();
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--node")
            cfg.node = next(), have_node = true;
        else if (a == "--fabric")
            fabric = next();
        else if (a == "--sysfs")
            cfg.sysfs_dir = next();
        else if (a == "--dev-dir")
            dev_dir = next();
        else if (a == "--devices" || a == "--ports") {
            std::string v = next();
            char *end = nullptr;
            unsigned long n = std::strtoul(v.c_str(), &end, 10);
            const uint32_t max = a == "--devices" ? limits::kMaxDevices : limits::kMaxPorts;
            if (v.empty() || *end || n < 1 || n > max) {
                std::fprintf(stderr, "simhcad: %s %s: expected a number from 1 to %u\n", a.c_str(), v.c_str(), max);
                return 2;
            }
            (a == "--devices" ? cfg.devices : cfg.ports) = uint32_t(n);
        } else if (a == "--no-realtime")
            realtime = false;
        else if (a == "-h" || a == "--help")
            return usage(), 0;
        else {
            std::fprintf(stderr, "simhcad: unknown argument '%s'\n", a.c_str());
            usage();
            return 2;
        }
    }
    if (!have_node) {
        usage();
        return 2;
    }
    std::vector<FabricNode> nodes;
    if (!fabric.empty()) {
        std::string err;
        if (!load_fabric(fabric, nodes, err)) {
            std::fprintf(stderr, "simhcad: %s\n", err.c_str());
            return 1;
        }
        bool found = false;
        for (auto &n : nodes)
            if (n.name == cfg.node) cfg.lid = n.lid, cfg.rail_lids = n.lids, found = true;
        if (!found) {
            std::fprintf(stderr, "simhcad: node '%s' is not in fabric file %s\n", cfg.node.c_str(), fabric.c_str());
            return 1;
        }
    }
    if (cfg.sysfs_dir.empty()) {
        const char *inst = std::getenv("SIMHCA_INSTANCE");
        const char *tmp = std::getenv("TMPDIR");
        // <root>/class/infiniband/simhca0, so SYSFS_PATH=<root> gives rdma-core
        // users (Open MPI checks $SYSFS_PATH/class/infiniband) a sysfs view.
        cfg.sysfs_dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/simhca-sysfs" +
                        (inst && *inst ? std::string(".") + inst : std::string()) + "/class/infiniband/simhca0";
    }
    if (fabric.empty())
        for (uint32_t r = 0; r < cfg.devices * cfg.ports; ++r) cfg.rail_lids.push_back(uint16_t(cfg.lid + r));
    std::string err;
    std::vector<std::unique_ptr<UverbsFile>> uverbs;
    {
        ObjectTable shape(cfg);  // the ports as the device will have them, for the files
        for (uint32_t d = 0; d < cfg.devices; ++d) {
            const Port *first = &shape.ports[shape.rail_of(d, 1)];
            if (!write_sysfs(shape.sysfs_dir(d), first->port_guid, first, cfg.ports, err))
                std::fprintf(stderr, "simhcad: warning: %s\n", err.c_str());
            if (dev_dir.empty()) continue;
            uverbs.push_back(std::make_unique<UverbsFile>());
            if (!uverbs.back()->create(dev_dir, d, err)) {
                std::fprintf(stderr, "simhcad: %s\n", err.c_str());
                return 1;
            }
        }
    }

    // The daemon is the adapter: when applications busy-poll every core (MPI
    // and perftest poll memory, not only CQs), it must still run promptly
    // after a doorbell or a packet, or latencies grow tails of milliseconds.
    // Real-time round-robin at the lowest priority does that (docs/benchmarks.md,
    // "Figures behind constants in the code"); it sleeps
    // in epoll when idle, so it never takes a CPU for nothing. Without the
    // privilege (or with --no-realtime / SIMHCA_REALTIME=0) a raised nice.
    const char *rt = std::getenv("SIMHCA_REALTIME");
    sched_param sp{};
    sp.sched_priority = 1;
    if (!realtime || (rt && std::strcmp(rt, "0") == 0) ||
        ::sched_setscheduler(0, SCHED_RR | SCHED_RESET_ON_FORK, &sp) != 0)
        (void)::setpriority(PRIO_PROCESS, 0, -10);

    Device dev(cfg);
    // SIMHCA_DOORBELL_ALWAYS=1: clients ring on every post (no shared "awake" word), for comparisons.
    const char *always = std::getenv("SIMHCA_DOORBELL_ALWAYS");
    if (!(always && std::strcmp(always, "0") != 0))
        if (int e = dev.doorbells().setup_awake_page())
            std::fprintf(stderr, "simhcad: warning: no shared awake word (%s): clients ring every post\n",
                         std::strerror(e));
    Server srv(dev);
    if (int e = srv.listen(nodes)) {
        std::fprintf(stderr, "simhcad: cannot listen on %s: %s%s\n", daemon_address_text().c_str(), std::strerror(e),
                     e == EADDRINUSE ? " (another simhcad is running there)" : "");
        return 1;
    }
    return srv.run();
}
