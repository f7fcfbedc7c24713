// SPDX-License-Identifier: BSD-3-Clause
// simhca-ctl: inspect and poke the local simhcad.
//   simhca-ctl wait-ready [--timeout S] | status | counters | list [--json] | fault WHAT
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <memory>
#include <sstream>
#include <vector>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../common/protocol.hpp"
#include "../common/socket_io.hpp"

using namespace simhca;

namespace {

void usage(FILE *f) {
    std::fprintf(f, "usage: simhca-ctl COMMAND\n"
                    "  wait-ready [--timeout S]  wait until simhcad answers (default 10 s)\n"
                    "  status                    device state, object counts and port counters\n"
                    "  counters                  port counters, one \"NAME VALUE\" per line (as in sysfs\n"
                    "                            ports/1/hw_counters: local_ack_timeout_err = retransmissions\n"
                    "                            after the ACK timer ran out)\n"
                    "  sysfs-root                print R with R/class/infiniband/simhca0 = the daemon's sysfs view\n"
                    "  list [--json]             objects: QPs (type, state, owner, handles), SRQs, XRCDs\n"
                    "  fault port-down|port-up   change the port state (raises PORT_ERR / PORT_ACTIVE)\n"
                    "  fault drop NODE           lose all traffic to/from NODE (transport retries, then errors)\n"
                    "  fault delay NODE MS       traffic to/from NODE arrives MS ms late each way (in order;\n"
                    "                            beyond the ACK timeout the transport retries, then errors)\n"
                    "  fault undelay NODE        stop delaying NODE's traffic\n"
                    "  fault restore NODE        stop dropping and delaying NODE's traffic\n"
                    "  fault stop                DEVICE_FATAL to every client, then simhcad exits\n"
                    "Talks to %s (set SIMHCA_INSTANCE to choose another daemon).\n",
                 daemon_address_text().c_str());
}

int connect_daemon() {
    int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    sockaddr_un addr;
    socklen_t len = daemon_address(addr);
    if (::connect(s, reinterpret_cast<sockaddr *>(&addr), len) < 0) {
        ::close(s);
        return -1;
    }
    return s;
}

std::string g_text; // listing text that followed the reply header

int call(proto::Op op, proto::Request &req, proto::Response &resp) {
    int s = connect_daemon();
    if (s < 0) return ECONNREFUSED;
    req.op = uint32_t(op);
    int fds[4];
    int e = send_with_fds(s, &req, sizeof(req), nullptr, 0);
    // Listings arrive as one datagram of any length: peek at its size first.
    std::vector<char> big;
    long n;
    if (!e && (op == proto::Op::Status || op == proto::Op::ListObjects)) {
        ssize_t len = ::recv(s, nullptr, 0, MSG_PEEK | MSG_TRUNC);
        big.resize(size_t(std::max<ssize_t>(len, 0)) + 1);
        n = recv_with_fds(s, big.data(), big.size(), fds, 4);
        if (n >= long(offsetof(proto::Response, raw))) {
            std::memcpy(&resp, big.data(), offsetof(proto::Response, raw));
            g_text.assign(big.data() + offsetof(proto::Response, raw), size_t(n) - offsetof(proto::Response, raw));
        }
    } else {
        n = e ? -e : recv_with_fds(s, &resp, sizeof(resp), fds, 4);
    }
    for (int fd : fds)
        if (fd >= 0) ::close(fd);
    ::close(s);
    if (n <= 0) return n == 0 ? ECONNRESET : int(-n);
    return resp.err;
}

// Prints the counters line of a status text as "NAME VALUE" lines.
int print_counters(const std::string &status) {
    const std::string prefix = proto::kCountersLinePrefix;
    const size_t at = status.find("\n" + prefix);
    if (at == std::string::npos) {
        std::fprintf(stderr, "simhca-ctl: counters: the daemon's status has no counters line\n");
        return 1;
    }
    const size_t begin = at + 1 + prefix.size();
    std::istringstream line(status.substr(begin, status.find('\n', begin) - begin));
    std::string name, value;
    while (line >> name >> value) std::printf("%s %s\n", name.c_str(), value.c_str());
    return 0;
}

double now() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

} // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    std::string cmd = argv[1];
    auto req = std::make_unique<proto::Request>();
    auto resp = std::make_unique<proto::Response>();
    if (cmd == "-h" || cmd == "--help") {
        usage(stdout);
        return 0;
    }
    if (cmd == "wait-ready") {
        double timeout = 10;
        if (argc >= 4 && std::strcmp(argv[2], "--timeout") == 0) timeout = std::atof(argv[3]);
        double end = now() + timeout;
        for (;;) {
            if (call(proto::Op::Probe, *req, *resp) == 0) return 0;
            if (now() >= end) {
                std::fprintf(stderr, "simhca-ctl: no simhcad at %s after %.1f s\n", daemon_address_text().c_str(),
                             timeout);
                return 1;
            }
            ::usleep(20000);
        }
    }
    if (cmd == "sysfs-root") {
        // Prints the root R such that R/class/infiniband/simhca0 is the
        // daemon's sysfs view (what SYSFS_PATH should be for rdma-core users).
        if (int e = call(proto::Op::Probe, *req, *resp)) {
            std::fprintf(stderr, "simhca-ctl: sysfs-root: %s\n", std::strerror(e));
            return 1;
        }
        std::string p = resp->hello.sysfs_dir, tail = "/class/infiniband/simhca0";
        if (p.size() <= tail.size() || p.compare(p.size() - tail.size(), tail.size(), tail) != 0) {
            std::fprintf(stderr, "simhca-ctl: sysfs dir %s is not laid out as ROOT%s\n", p.c_str(), tail.c_str());
            return 1;
        }
        std::printf("%s\n", p.substr(0, p.size() - tail.size()).c_str());
        return 0;
    }
    int e;
    if (cmd == "status" || cmd == "counters") {
        e = call(proto::Op::Status, *req, *resp);
    } else if (cmd == "list") {
        req->list.json = argc >= 3 && std::strcmp(argv[2], "--json") == 0;
        e = call(proto::Op::ListObjects, *req, *resp);
    } else if (cmd == "fault" && argc >= 3) {
        std::snprintf(req->fault.what, sizeof(req->fault.what), "%s", argv[2]);
        if (argc >= 4) std::snprintf(req->fault.arg, sizeof(req->fault.arg), "%s", argv[3]);
        bool delay = std::strcmp(argv[2], "delay") == 0;
        char *end = nullptr;
        unsigned long ms = delay && argc >= 5 ? std::strtoul(argv[4], &end, 10) : 0;
        if (delay && (argc < 5 || !end || *end || ms == 0 || ms > 3600 * 1000)) {
            std::fprintf(stderr, "simhca-ctl: fault delay NODE MS: MS must be 1..3600000\n");
            return 2;
        }
        req->fault.ms = uint32_t(ms);
        e = call(proto::Op::Fault, *req, *resp);
        if (e == EINVAL) std::fprintf(stderr, "simhca-ctl: unknown fault '%s'\n", argv[2]);
        if (e == ENOENT) std::fprintf(stderr, "simhca-ctl: no node '%s' in the fabric\n", argc >= 4 ? argv[3] : "");
    } else {
        usage(stderr);
        return 2;
    }
    if (e) {
        std::fprintf(stderr, "simhca-ctl: %s: %s\n", cmd.c_str(), std::strerror(e));
        return 1;
    }
    if (cmd == "counters") return print_counters(g_text);
    if (cmd != "fault") std::fputs(g_text.c_str(), stdout);
    return 0;
}
