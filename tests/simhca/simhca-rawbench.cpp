// SPDX-License-Identifier: BSD-3-Clause
// The raw baselines the software HCA is measured against (issue 3, "Speed"), run by simhca-bench.sh in the
// same run as perftest on simhca:
//   simhca-rawbench tcp [--iters N] [--size BYTES] [--stream-bytes BYTES]
//       two processes (fork) joined by TCP over 127.0.0.1 (the daemons' path between simulated nodes),
//       TCP_NODELAY, blocking sockets: an 8-byte ping-pong (round-trip time), then a one-way stream of
//       --size writes (default 1 MiB), timed at the receiver until the last byte arrived.
//   simhca-rawbench pvm [--size BYTES] [--bytes TOTAL]
//       a process_vm_writev loop from this process into a child's buffer (both cache-hot, like the
//       daemon's chunk copies), whole --size buffers per call.
// Output: `key value` lines (times in us, rates in GB/s = 1e9 bytes/s), easy to parse from shell.
#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char *what) {
    std::fprintf(stderr, "rawbench: %s: %s\n", what, std::strerror(errno));
    std::exit(1);
}

void full_write(int fd, const void *p, size_t n) {
    const char *c = static_cast<const char *>(p);
    while (n) {
        ssize_t k = ::write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) die("write");
        c += k;
        n -= size_t(k);
    }
}

void full_read(int fd, void *p, size_t n) {
    char *c = static_cast<char *>(p);
    while (n) {
        ssize_t k = ::read(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) die("read");
        c += k;
        n -= size_t(k);
    }
}

void nodelay(int s) {
    int one = 1;
    ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

int tcp(long iters, size_t size, size_t stream_bytes) {
    int l = ::socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0) die("socket");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    if (::bind(l, reinterpret_cast<sockaddr *>(&a), sizeof(a)) < 0 || ::listen(l, 1) < 0 ||
        ::getsockname(l, reinterpret_cast<sockaddr *>(&a), &al) < 0)
        die("listen");
    pid_t child = ::fork();
    if (child < 0) die("fork");
    if (child == 0) { // the echo / sink side
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        int s = ::accept(l, nullptr, nullptr);
        if (s < 0) die("accept");
        nodelay(s);
        char m[8];
        for (long i = 0; i < iters; ++i) {
            full_read(s, m, sizeof(m));
            full_write(s, m, sizeof(m));
        }
        std::vector<char> buf(size);
        for (size_t got = 0; got < stream_bytes;) {
            ssize_t k = ::read(s, buf.data(), std::min(size, stream_bytes - got));
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) die("stream read");
            got += size_t(k);
        }
        full_write(s, m, 1); // "all received"
        ::_exit(0);
    }
    ::close(l);
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || ::connect(s, reinterpret_cast<sockaddr *>(&a), sizeof(a)) < 0) die("connect");
    nodelay(s);
    std::vector<double> rtt;
    rtt.reserve(size_t(iters));
    uint64_t v = 0;
    for (long i = 0; i < iters; ++i) {
        auto t0 = Clock::now();
        ++v;
        full_write(s, &v, sizeof(v));
        uint64_t back = 0;
        full_read(s, &back, sizeof(back));
        rtt.push_back(us_since(t0));
        if (back != v) {
            std::fprintf(stderr, "rawbench: ping-pong data mismatch\n");
            return 1;
        }
    }
    std::sort(rtt.begin(), rtt.end());
    double sum = 0;
    for (double r : rtt) sum += r;
    std::printf("tcp_rtt_median_us %.2f\ntcp_rtt_avg_us %.2f\ntcp_rtt_min_us %.2f\n", rtt[rtt.size() / 2],
                sum / double(rtt.size()), rtt.front());
    std::vector<char> buf(size, 'x');
    auto t0 = Clock::now();
    for (size_t sent = 0; sent < stream_bytes; sent += size) full_write(s, buf.data(), std::min(size, stream_bytes - sent));
    char done;
    full_read(s, &done, 1);
    double us = us_since(t0);
    std::printf("tcp_stream_size %zu\ntcp_stream_gbs %.3f\n", size, double(stream_bytes) / us / 1e3);
    int st = 0;
    ::waitpid(child, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

int pvm(size_t size, size_t total) {
    std::vector<char> dst(size, 0); // the child's copy of this (after fork) is the target
    int p[2];
    if (::pipe(p) < 0) die("pipe");
    pid_t child = ::fork();
    if (child < 0) die("fork");
    if (child == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        std::memset(dst.data(), 1, size); // its own pages, faulted in
        char c = 0;
        full_write(p[1], &c, 1);
        for (;;) ::pause(); // the parent kills it when done
        ::_exit(0);
    }
    char c;
    full_read(p[0], &c, 1);
    std::vector<char> src(size, 'y');
    iovec local{src.data(), size}, remote{dst.data(), size};
    auto once = [&] {
        ssize_t n = ::process_vm_writev(child, &local, 1, &remote, 1, 0);
        if (n != ssize_t(size)) die("process_vm_writev");
    };
    for (int i = 0; i < 16; ++i) once(); // warm up
    size_t calls = std::max<size_t>(1, total / size);
    auto t0 = Clock::now();
    for (size_t i = 0; i < calls; ++i) once();
    double us = us_since(t0);
    // Check the data arrived: read it back.
    std::vector<char> back(size);
    iovec lb{back.data(), size};
    if (::process_vm_readv(child, &lb, 1, &remote, 1, 0) != ssize_t(size) || back != src) {
        std::fprintf(stderr, "rawbench: process_vm_writev data mismatch\n");
        return 1;
    }
    std::printf("pvm_size %zu\npvm_gbs %.3f\n", size, double(calls * size) / us / 1e3);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: rawbench tcp [--iters N] [--size B] [--stream-bytes B] | pvm [--size B] [--bytes B]\n");
        return 2;
    }
    std::string mode = argv[1];
    long iters = 20000;
    size_t size = 1 << 20, stream = size_t(4) << 30, bytes = size_t(16) << 30;
    for (int i = 2; i + 1 < argc; i += 2) {
        std::string k = argv[i];
        unsigned long long v = std::strtoull(argv[i + 1], nullptr, 0);
        if (k == "--iters") iters = long(v);
        else if (k == "--size") size = v;
        else if (k == "--stream-bytes") stream = v;
        else if (k == "--bytes") bytes = v;
        else {
            std::fprintf(stderr, "rawbench: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    if (mode == "tcp") return tcp(iters, size, stream);
    if (mode == "pvm") return pvm(size, bytes);
    std::fprintf(stderr, "rawbench: unknown mode %s\n", mode.c_str());
    return 2;
}
