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
    std::fprintf(f,
                 "usage: simhca-ctl COMMAND\n"
                 "  wait-ready [--timeout S]  wait until simhcad answers (default 10 s)\n"
                 "  status                    device state, object counts and port counters (one line per port\n"
                 "                            with state, LID, fabric, speed and width when there are several)\n"
                 "  counters [--device D] [--port P]\n"
                 "                            a port's counters (default simhca0 port 1), one \"NAME VALUE\" per\n"
                 "                            line (as in sysfs ports/P/hw_counters: local_ack_timeout_err =\n"
                 "                            retransmissions after the ACK timer ran out)\n"
                 "  sysfs-root                print R with R/class/infiniband/simhca0 = the daemon's sysfs view\n"
                 "  list [--json]             objects: QPs (type, state, owner, handles), SRQs, XRCDs (JSON: CQs)\n"
                 "Faults. --device D (simhcaN or N) and --port P choose the ports; without them every port of\n"
                 "every device. Port events go to the contexts of that port's device.\n"
                 "  fault port-down|port-up [--device D] [--port P]\n"
                 "                            change the port state (raises PORT_ERR / PORT_ACTIVE); QPs keep\n"
                 "                            their state and retry, as on a real link loss\n"
                 "  fault port-up-quiet|port-down-quiet [--device D] [--port P]\n"
                 "                            port up without PORT_ACTIVE, or down without PORT_ERR (an event\n"
                 "                            lost or read too late): only ibv_query_port and sysfs show it\n"
                 "  fault flap --seconds S [--device D] [--port P]\n"
                 "                            port down now (PORT_ERR), back up after S seconds (decimal, up to\n"
                 "                            3600; PORT_ACTIVE) by the daemon itself\n"
                 "  fault ack-drop|ack-restore [--device D] [--port P]\n"
                 "                            the link dies between the data and the acknowledgement: requests\n"
                 "                            still cross the port both ways and are handled where they arrive\n"
                 "                            (delivered, written, executed once), but every answer crossing it\n"
                 "                            (ACK, NAK, read or atomic response) is lost. Requesters on both sides\n"
                 "                            retry and end with RETRY_EXC_ERR and a flush; a port-down then makes\n"
                 "                            it a plain link loss. Lasts until ack-restore or port-up\n"
                 "  fault lid --port P --lid L [--device D]\n"
                 "                            the subnet manager gives the port LID L: LID_CHANGE; every node\n"
                 "                            routes L to this port and the old LID to nobody (QPs keep their\n"
                 "                            path until they migrate: ALT_PATH + MIGRATED)\n"
                 "  fault client-reregister|sm-change|pkey-change|gid-change [--device D] [--port P]\n"
                 "                            raise CLIENT_REREGISTER / SM_CHANGE / PKEY_CHANGE / GID_CHANGE\n"
                 "  fault speed [--speed N] [--width W] [--device D] [--port P]\n"
                 "                            set ibv_query_port's active_speed (1 SDR, 2 DDR, 4 QDR, 8 FDR10,\n"
                 "                            16 FDR, 32 EDR, 64 HDR, 128 NDR) and active_width (1 1X, 2 4X,\n"
                 "                            4 8X, 8 12X, 16 2X); sysfs rate follows\n"
                 "  fault event NAME --qp QPN | --cq CQN | --srq SRQN | [--device D] [--port P]\n"
                 "                            raise IBV_EVENT_NAME: on a QP (every process's handle of it: QP_FATAL,\n"
                 "                            QP_REQ_ERR, QP_ACCESS_ERR - these also move the QP to ERR and flush\n"
                 "                            it -, COMM_EST, SQ_DRAINED, PATH_MIG, PATH_MIG_ERR,\n"
                 "                            QP_LAST_WQE_REACHED), a CQ (CQ_ERR; CQN as in list --json), an SRQ\n"
                 "                            (SRQ_ERR, SRQ_LIMIT_REACHED), ports (PORT_ACTIVE, PORT_ERR,\n"
                 "                            LID_CHANGE, PKEY_CHANGE, SM_CHANGE, CLIENT_REREGISTER, GID_CHANGE:\n"
                 "                            the event only) or the device (DEVICE_FATAL, the event only)\n"
                 "  fault misroute --qp QPN [--srq SRQN]\n"
                 "                            the next request of XRC INI QP QPN names SRQ SRQN (default: none that\n"
                 "                            exists): the responder refuses it (TGT QP to ERR, QP_REQ_ERR on every\n"
                 "                            handle; the sender gets REM_INV_REQ_ERR)\n"
                 "  fault bad-rkey --qp QPN   the next RDMA or atomic of QP QPN carries an rkey nobody has (the\n"
                 "                            responder QP to ERR, QP_ACCESS_ERR; the sender gets REM_ACCESS_ERR)\n"
                 "  fault drop NODE           lose all traffic to/from NODE (transport retries, then errors)\n"
                 "  fault delay NODE MS       traffic to/from NODE arrives MS ms late each way (in order;\n"
                 "                            beyond the ACK timeout the transport retries, then errors)\n"
                 "  fault undelay NODE        stop delaying NODE's traffic\n"
                 "  fault restore NODE        stop dropping and delaying NODE's traffic\n"
                 "  fault stop                DEVICE_FATAL to every client, then simhcad exits\n"
                 "Numbers take 0x for hex (QPNs as status shows them). Talks to %s (set SIMHCA_INSTANCE to\n"
                 "choose another daemon).\n",
                 daemon_address_text().c_str());
}

// "simhcaN" or "N" -> N; -1 when malformed.
long device_index(const char *s) {
    if (std::strncmp(s, "simhca", 6) == 0) s += 6;
    char *end = nullptr;
    long v = std::strtol(s, &end, 10);
    return *s && !*end && v >= 0 && v < 64 ? v : -1;
}

bool number(const char *s, unsigned long max, unsigned long &out) {
    char *end = nullptr;
    errno = 0;
    out = std::strtoul(s, &end, 0);
    return *s && !*end && !errno && out <= max;
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

std::string g_text;  // listing text that followed the reply header

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

// Prints the counters line of a status text (of port `port` of device `device`) as "NAME VALUE" lines.
int print_counters(const std::string &status, long device, unsigned long port) {
    const std::string prefix = (device > 0 ? "simhca" + std::to_string(device) + " " : std::string()) + "port " +
                               std::to_string(port) + " counters:";
    const size_t at = status.find("\n" + prefix);
    if (at == std::string::npos) {
        std::fprintf(stderr, "simhca-ctl: counters: the daemon has no such device or port (see status)\n");
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

}  // namespace

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
        proto::FaultReq &f = req->fault;
        f.device = -1;
        std::snprintf(f.what, sizeof(f.what), "%s", argv[2]);
        const std::string what = argv[2];
        int positional = 0;
        bool have_seconds = false, have_lid = false;
        const char *target = nullptr;
        for (int i = 3; i < argc; ++i) {
            std::string a = argv[i];
            unsigned long v = 0;
            auto value = [&]() -> const char * {
                if (i + 1 >= argc) {
                    std::fprintf(stderr, "simhca-ctl: fault %s: %s needs a value\n", what.c_str(), a.c_str());
                    std::exit(2);
                }
                return argv[++i];
            };
            auto bad = [&](const char *form) {
                std::fprintf(stderr, "simhca-ctl: fault %s: %s %s: expected %s\n", what.c_str(), a.c_str(), argv[i],
                             form);
                std::exit(2);
            };
            if (a == "--device") {
                const char *d = value();
                long idx = device_index(d);
                if (idx < 0) bad("simhcaN or N");
                f.device = int32_t(idx);
            } else if (a == "--port") {
                if (!number(value(), 255, v) || v == 0) bad("a port number 1..255");
                f.port = uint32_t(v);
            } else if (a == "--seconds") {
                char *end = nullptr;
                const char *t = value();
                double sec = std::strtod(t, &end);
                if (!*t || *end || !(sec > 0) || sec > 3600) bad("seconds, more than 0 and at most 3600");
                f.ms = std::max<uint32_t>(1, uint32_t(sec * 1000 + 0.5));
                have_seconds = true;
            } else if (a == "--lid") {
                if (!number(value(), 0xbfff, v) || v == 0) bad("a unicast LID 1..0xbfff");
                f.number = uint32_t(v);
                have_lid = true;
            } else if (a == "--srq" && what == "misroute") {
                if (!number(value(), 0xffffff, v) || v == 0) bad("an SRQ number 1..0xffffff");
                f.value = uint32_t(v);
            } else if (a == "--qp" || a == "--cq" || a == "--srq") {
                if (!number(value(), 0xffffffff, v)) bad("a number");
                f.number = uint32_t(v);
                target = argv[i - 1];
            } else if (a == "--speed") {
                if (!number(value(), 128, v) || v == 0) bad("1, 2, 4, 8, 16, 32, 64 or 128");
                f.number = uint32_t(v);
            } else if (a == "--width") {
                if (!number(value(), 16, v) || v == 0) bad("1, 2, 4, 8 or 16");
                f.value = uint32_t(v);
            } else if (a.rfind("--", 0) == 0) {
                std::fprintf(stderr, "simhca-ctl: fault %s: unknown option %s\n", what.c_str(), a.c_str());
                return 2;
            } else if (positional++ == 0) {
                std::snprintf(f.arg, sizeof(f.arg), "%s", argv[i]);
            } else if (what == "delay" && positional == 2) {
                if (!number(argv[i], 3600 * 1000, v) || v == 0) {
                    std::fprintf(stderr, "simhca-ctl: fault delay NODE MS: MS must be 1..3600000\n");
                    return 2;
                }
                f.ms = uint32_t(v);
            } else {
                std::fprintf(stderr, "simhca-ctl: fault %s: unexpected argument %s\n", what.c_str(), argv[i]);
                return 2;
            }
        }
        if (what == "delay" && f.ms == 0) {
            std::fprintf(stderr, "simhca-ctl: fault delay NODE MS: MS must be 1..3600000\n");
            return 2;
        }
        if (what == "flap" && !have_seconds) {
            std::fprintf(stderr, "simhca-ctl: fault flap needs --seconds S\n");
            return 2;
        }
        if (what == "lid" && (!have_lid || f.port == 0)) {
            std::fprintf(stderr, "simhca-ctl: fault lid needs --port P and --lid L\n");
            return 2;
        }
        if (what == "event" && !positional) {
            std::fprintf(stderr, "simhca-ctl: fault event needs an event NAME (see --help)\n");
            return 2;
        }
        if ((what == "misroute" || what == "bad-rkey") && (target == nullptr || std::strcmp(target, "--qp") != 0)) {
            std::fprintf(stderr, "simhca-ctl: fault %s needs --qp QPN (the sender's QP)\n", what.c_str());
            return 2;
        }
        e = call(proto::Op::Fault, *req, *resp);
        if (e == EINVAL) std::fprintf(stderr, "simhca-ctl: fault '%s': unknown fault, event or value\n", argv[2]);
        if (e == ENODEV) std::fprintf(stderr, "simhca-ctl: fault '%s': no such device or port\n", argv[2]);
        if (e == ENOENT)
            std::fprintf(stderr, "simhca-ctl: fault '%s': %s\n", argv[2],
                         what == "event"                            ? "no such QP, CQ, SRQ or port"
                         : what == "misroute" || what == "bad-rkey" ? "no such requester QP"
                                                                    : "no such node in the fabric");
    } else {
        usage(stderr);
        return 2;
    }
    if (e) {
        std::fprintf(stderr, "simhca-ctl: %s: %s\n", cmd.c_str(), std::strerror(e));
        return 1;
    }
    if (cmd == "counters") {
        long device = 0;
        unsigned long port = 1;
        for (int i = 2; i + 1 < argc; i += 2) {
            if (std::strcmp(argv[i], "--device") == 0 && device_index(argv[i + 1]) >= 0)
                device = device_index(argv[i + 1]);
            else if (std::strcmp(argv[i], "--port") == 0 && number(argv[i + 1], 255, port) && port > 0)
                continue;
            else {
                std::fprintf(stderr, "simhca-ctl: counters [--device simhcaN] [--port P]\n");
                return 2;
            }
        }
        return print_counters(g_text, device, port);
    }
    if (cmd != "fault") std::fputs(g_text.c_str(), stdout);
    return 0;
}
