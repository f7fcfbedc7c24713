// SPDX-License-Identifier: BSD-3-Clause
#include "network.hpp"

#include "clock.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "clock.hpp"

namespace simhca {

namespace {

constexpr uint32_t kFrameMagic = 0x53484346;  // "SHCF"
constexpr uint32_t kReq = 1, kResp = 2;
// Between daemons only: a node's port has a new LID (the subnet manager's update of every node's routes).
constexpr uint32_t kLidChange = 3;
constexpr size_t kMaxFrame = size_t(1) << 31;  // a hostile length closes the connection

struct FrameHdr {
    uint32_t magic, type;
    uint64_t len;  // body bytes
    uint64_t token;
};

// The wire form of a Message (both ends are the same build on one machine,
// but the layout is explicit so it never depends on Message's C++ layout).
struct WireReq {
    uint32_t opcode, src_qpn, dst_qpn, srqn, rkey, imm, length, qkey;
    uint16_t src_lid;
    uint8_t has_imm, solicited, has_grh, has_inv;
    uint16_t dlid;
    uint64_t remote_addr, compare_add, swap, stream, seq;
    uint8_t grh[40];
};

// Message and WireReq name their header fields alike: one copy serves both
// directions.
template <class To, class From>
void copy_header(To &t, const From &f) {
    t.opcode = f.opcode;
    t.src_qpn = f.src_qpn;
    t.dst_qpn = f.dst_qpn;
    t.srqn = f.srqn;
    t.rkey = f.rkey;
    t.imm = f.imm;
    t.length = f.length;
    t.qkey = f.qkey;
    t.src_lid = f.src_lid;
    t.dlid = f.dlid;
    t.has_imm = f.has_imm;
    t.solicited = f.solicited;
    t.has_grh = f.has_grh;
    t.has_inv = f.has_inv;
    t.remote_addr = f.remote_addr;
    t.compare_add = f.compare_add;
    t.swap = f.swap;
    t.stream = f.stream;
    t.seq = f.seq;
    static_assert(sizeof(t.grh) == sizeof(f.grh));
    std::memcpy(t.grh, f.grh, sizeof(t.grh));
}

struct WireLidChange {
    uint16_t key, old_lid, new_lid, pad;
    uint32_t fabric;
};

struct WireResp {
    uint32_t status;
    uint8_t rnr_timer, pad[3];
};

uint64_t tag(uint32_t kind, uint32_t id) {
    return (uint64_t(kind) << 32) | id;
}

constexpr uint32_t kDelayTimerId = ~0u;  // epoll id of the delay line's timer (connections count up from 1)
constexpr uint32_t kMaxDelayMs = 3600 * 1000;

}  // namespace

Network::Network(ObjectTable &objs, Responder &resp, Completer &comp, std::vector<FabricNode> nodes, int epoll_fd,
                 uint32_t kind)
    : objs_(objs),
      resp_(resp),
      comp_(comp),
      nodes_(std::move(nodes)),
      my_lid_(objs.cfg.lid),
      epoll_(epoll_fd),
      kind_(kind),
      delay_(epoll_fd, tag(kind, kDelayTimerId)) {
    index_lids();
}

Network::~Network() = default;

void Network::index_lids() {
    key_of_lid_.clear();
    for (const FabricNode &n : nodes_)
        for (uint16_t l : n.lids)
            if (l && l != n.lid) key_of_lid_[l] = n.lid;
}

const FabricNode *Network::node_by_key(uint16_t key) const {
    for (auto &n : nodes_)
        if (n.lid == key) return &n;
    return nullptr;
}

bool Network::change_lid(uint32_t fabric, uint16_t old_lid, uint16_t new_lid) {
    if (const FabricNode *other = node_on_fabric(fabric, new_lid); other && other->lid != my_lid_) return false;
    apply_lid_change(my_lid_, fabric, old_lid, new_lid);
    // Straight on each node's connection, past drops and delays: the subnet manager's management traffic,
    // not the data path. Whatever this node sends to a peer afterwards travels behind it on the same
    // connection, so no peer meets the new LID before it knows where it lives.
    const WireLidChange w{my_lid_, old_lid, new_lid, 0, fabric};
    for (const FabricNode &n : nodes_)
        if (n.lid != my_lid_)
            if (Conn *c = connect_to(n.lid)) queue(*c, kLidChange, 0, &w, sizeof(w), nullptr, 0);
    return true;
}

void Network::apply_lid_change(uint16_t key, uint32_t fabric, uint16_t old_lid, uint16_t new_lid) {
    for (FabricNode &n : nodes_)
        if (n.lid == key && fabric >= 1 && fabric <= n.lids.size() && n.lids[fabric - 1] == old_lid)
            n.lids[fabric - 1] = new_lid;
    index_lids();
}

int Network::listen() {
    const FabricNode *me = node_by_key(my_lid_);
    if (!me) return ENOENT;
    listen_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!listen_) return errno;
    int one = 1;
    ::setsockopt(listen_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(me->port);
    // Any address: the node's network namespace only has its own anyway.
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(listen_.get(), reinterpret_cast<sockaddr *>(&a), sizeof(a)) < 0) return errno;
    if (::listen(listen_.get(), 64) < 0) return errno;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag(kind_, 0);
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, listen_.get(), &ev);
    return 0;
}

void Network::watch(Conn &c, bool want_write) {
    epoll_event ev{};
    ev.events = EPOLLIN | (want_write ? uint32_t(EPOLLOUT) : 0u);
    ev.data.u64 = tag(kind_, c.id);
    if (::epoll_ctl(epoll_, EPOLL_CTL_MOD, c.fd.get(), &ev) < 0) ::epoll_ctl(epoll_, EPOLL_CTL_ADD, c.fd.get(), &ev);
}

Network::Conn *Network::connect_to(uint16_t lid) {
    if (auto it = out_by_lid_.find(lid); it != out_by_lid_.end()) {
        auto c = conns_.find(it->second);
        if (c != conns_.end()) return c->second.get();
        out_by_lid_.erase(it);
    }
    const FabricNode *n = node_by_key(lid);
    if (!n) return nullptr;
    auto c = std::make_unique<Conn>();
    c->id = next_id_++;
    c->outgoing = true;
    c->peer_lid = lid;
    c->fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!c->fd) return nullptr;
    int one = 1;
    ::setsockopt(c->fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(n->port);
    if (::inet_pton(AF_INET, n->addr.c_str(), &a.sin_addr) != 1) return nullptr;
    int r = ::connect(c->fd.get(), reinterpret_cast<sockaddr *>(&a), sizeof(a));
    if (r < 0 && errno != EINPROGRESS) return nullptr;  // unreachable: the requester times out
    c->connected = r == 0;
    Conn &ref = *c;
    out_by_lid_[lid] = c->id;
    conns_[c->id] = std::move(c);
    watch(ref, true);
    return &ref;
}

// Sends header + a + b at once when nothing is queued (no copy of the
// payload); whatever the socket does not take now is kept for EPOLLOUT.
void Network::queue(Conn &c, uint32_t type, uint64_t token, const void *a, size_t alen, const void *b, size_t blen) {
    FrameHdr h{kFrameMagic, type, alen + blen, token};
    constexpr size_t kCorkMax = 4096;  // bigger frames are not copied: they go now, after what is corked
    if (c.corked && sizeof(h) + alen + blen <= kCorkMax) {
        const auto *hp = reinterpret_cast<const uint8_t *>(&h);
        c.cork.insert(c.cork.end(), hp, hp + sizeof(h));
        if (alen) c.cork.insert(c.cork.end(), static_cast<const uint8_t *>(a), static_cast<const uint8_t *>(a) + alen);
        if (blen) c.cork.insert(c.cork.end(), static_cast<const uint8_t *>(b), static_cast<const uint8_t *>(b) + blen);
        return;
    }
    iovec iov[4] = {
        {c.cork.data(), c.cork.size()}, {&h, sizeof(h)}, {const_cast<void *>(a), alen}, {const_cast<void *>(b), blen}};
    bool with_cork = !c.cork.empty();
    uint32_t id = c.id;
    send_iov(c, with_cork ? iov : iov + 1, (with_cork ? 3 : 2) + (blen ? 1 : 0));
    if (with_cork)
        if (auto it = conns_.find(id); it != conns_.end()) it->second->cork.clear();
}

void Network::uncork(uint32_t id) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Conn &c = *it->second;
    c.corked = false;
    if (c.cork.empty()) return;
    iovec iov{c.cork.data(), c.cork.size()};
    send_iov(c, &iov, 1);
    if (auto jt = conns_.find(id); jt != conns_.end()) jt->second->cork.clear();
}

void Network::send_iov(Conn &c, iovec *iov, int cnt) {
    size_t total = 0, done = 0;
    for (int i = 0; i < cnt; ++i) total += iov[i].iov_len;
    if (c.connected && c.out.empty()) {
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = size_t(cnt);
        ssize_t n;
        do {
            n = ::sendmsg(c.fd.get(), &msg, MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        if (n < 0 && errno != EAGAIN) {
            close_conn(c.id);
            return;
        }
        done = n > 0 ? size_t(n) : 0;
        if (done == total) return;
    }
    for (int i = 0; i < cnt; ++i) {  // keep the rest
        const iovec &v = iov[i];
        size_t skip = std::min(done, v.iov_len);
        done -= skip;
        const auto *u = static_cast<const uint8_t *>(v.iov_base);
        if (v.iov_len > skip) c.out.insert(c.out.end(), u + skip, u + v.iov_len);
    }
    if (c.connected) watch(c, true);
}

void Network::flush(Conn &c) {
    while (c.out_off < c.out.size()) {
        ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) break;
            close_conn(c.id);
            return;
        }
        c.out_off += size_t(n);
    }
    if (c.out_off == c.out.size()) {
        c.out.clear();
        c.out_off = 0;
        watch(c, false);
    } else {
        if (c.out_off > (1u << 20)) {  // compact now and then
            c.out.erase(c.out.begin(), c.out.begin() + long(c.out_off));
            c.out_off = 0;
        }
        watch(c, true);
    }
}

bool Network::send_request(uint32_t fabric, uint16_t dlid, uint64_t token, const Message &m) {
    // Only nodes cabled to the sender's fabric with that LID are reachable; another fabric's LID is nobody.
    const FabricNode *n = node_on_fabric(fabric, dlid);
    if (!n) return false;
    const uint16_t key = n->lid;           // connections, drops and delays are per node
    if (dropped_.count(key)) return true;  // "sent", and lost on the way
    bool delayed = delay_.holding(key);
    Conn *c = delayed ? nullptr : connect_to(key);
    if (!c && !delayed) return true;  // could not even connect: it looks like a lost packet
    WireReq w{};
    copy_header(w, m);
    if (c)
        queue(*c, kReq, token, &w, sizeof(w), m.data, m.size);
    else
        hold(key, false, 0, kReq, token, &w, sizeof(w), m.data, m.size);
    return true;
}

void Network::send_to_all(uint32_t fabric, const Message &m) {
    for (const FabricNode &n : nodes_)
        if (n.lid != my_lid_ && fabric <= n.lids.size() && n.lids[fabric - 1])
            send_request(fabric, n.lids[fabric - 1], 0, m);
}

const FabricNode *Network::node_on_fabric(uint32_t fabric, uint16_t lid) const {
    for (auto &n : nodes_)
        if (fabric <= n.lids.size() && n.lids[fabric - 1] == lid) return &n;
    return nullptr;
}

void Network::hold(uint16_t lid, bool inbound, uint32_t conn_id, uint32_t type, uint64_t token, const void *a,
                   size_t alen, const void *b, size_t blen) {
    DelayLine::Frame f;
    f.inbound = inbound;
    f.conn_id = conn_id;
    f.type = type;
    f.token = token;
    f.body.resize(alen + blen);
    if (alen) std::memcpy(f.body.data(), a, alen);
    if (blen) std::memcpy(f.body.data() + alen, b, blen);
    delay_.hold(lid, std::move(f));
}

// Frames whose delay is over go on as if they had just been sent / received;
// one whose connection closed meanwhile is lost (the requester times out).
void Network::release_held() {
    uint64_t now = now_ns();
    uint16_t lid;
    DelayLine::Frame f;
    while (delay_.pop_due(now, lid, f)) {
        if (dropped_.count(lid)) continue;
        Conn *c = nullptr;
        if (f.conn_id) {
            auto it = conns_.find(f.conn_id);
            c = it == conns_.end() ? nullptr : it->second.get();
        } else {
            c = connect_to(lid);
        }
        if (!c) continue;
        if (f.inbound)
            handle_frame(*c, f.type, f.token, f.body.data(), f.body.size(), true);
        else
            queue(*c, f.type, f.token, f.body.data(), f.body.size(), nullptr, 0);
    }
    delay_.rearm();
}

bool Network::set_delay(const std::string &node, uint32_t ms) {
    if (ms > kMaxDelayMs) return false;
    for (auto &n : nodes_)
        if (n.name == node) {
            delay_.set(n.lid, uint64_t(ms) * 1000000ull);
            release_held();  // with the delay gone, what waited goes now
            return true;
        }
    return false;
}

void Network::on_event(uint32_t id, uint32_t events) {
    if (id == kDelayTimerId) {
        delay_.drain_timer();
        release_held();
        return;
    }
    if (id == 0) {  // listening socket
        for (;;) {
            UniqueFd s(::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
            if (!s) return;
            int one = 1;
            ::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            auto c = std::make_unique<Conn>();
            c->id = next_id_++;
            c->fd = std::move(s);
            c->connected = true;
            Conn &ref = *c;
            conns_[c->id] = std::move(c);
            watch(ref, false);
        }
    }
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Conn &c = *it->second;
    if (!c.connected && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
        int err = 0;
        socklen_t l = sizeof(err);
        ::getsockopt(c.fd.get(), SOL_SOCKET, SO_ERROR, &err, &l);
        if (err) {
            close_conn(id);
            return;
        }
        c.connected = true;
    }
    if (events & EPOLLOUT) {
        flush(c);
        if (!conns_.count(id)) return;
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c);
}

void Network::on_readable(Conn &c) {
    uint32_t id = c.id;
    for (;;) {
        // Room for at least the whole current frame (big frames are read in
        // place, no reassembly copies).
        size_t want = 256 * 1024;
        if (c.in_len - c.in_off >= sizeof(FrameHdr)) {
            FrameHdr h;
            std::memcpy(&h, c.in.get() + c.in_off, sizeof(h));
            if (h.magic != kFrameMagic || h.len > kMaxFrame) {
                close_conn(id);
                return;
            }
            want = std::max(want, sizeof(h) + size_t(h.len));
        }
        if (c.in_cap - c.in_off < want) {
            size_t cap = std::max(want, c.in_cap);
            std::unique_ptr<uint8_t[]> n(new uint8_t[cap]);
            if (c.in_len > c.in_off) std::memcpy(n.get(), c.in.get() + c.in_off, c.in_len - c.in_off);
            c.in_len -= c.in_off;
            c.in_off = 0;
            c.in = std::move(n);
            c.in_cap = cap;
        }
        size_t room = c.in_cap - c.in_len;
        ssize_t n = ::recv(c.fd.get(), c.in.get() + c.in_len, room, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            close_conn(id);
            return;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            return;
        }
        c.in_len += size_t(n);
        c.corked = true;
        while (c.in_len - c.in_off >= sizeof(FrameHdr)) {
            FrameHdr h;
            std::memcpy(&h, c.in.get() + c.in_off, sizeof(h));
            if (h.magic != kFrameMagic || h.len > kMaxFrame) {
                close_conn(id);
                return;
            }
            if (c.in_len - c.in_off < sizeof(h) + h.len) break;
            handle_frame(c, h.type, h.token, c.in.get() + c.in_off + sizeof(h), h.len);
            if (!conns_.count(id)) return;
            c.in_off += sizeof(h) + h.len;
        }
        uncork(id);  // what the batch produced for this connection leaves in one send
        if (!conns_.count(id)) return;
        if (c.in_off == c.in_len) c.in_off = c.in_len = 0;
        // A short read drained the socket: no second recv just to see EAGAIN (one syscall less per
        // message); epoll is level-triggered here and reports whatever arrives after this read.
        if (size_t(n) < room) return;
    }
}

void Network::handle_frame(Conn &c, uint32_t type, uint64_t token, const uint8_t *body, size_t len, bool held) {
    // A port that is down has no link: nothing arrives through it, neither requests (the responder drops
    // them: Responder::respond) nor answers to this node's earlier requests (Completer::on_remote_reply);
    // the peers' transports time out, as on a fabric.
    if (type == kReq) {
        if (len < sizeof(WireReq)) return;
        WireReq w;
        std::memcpy(&w, body, sizeof(w));
        const uint16_t src = node_key(w.src_lid);
        if (dropped_.count(src)) return;
        if (!held && delay_.holding(src)) return hold(src, true, c.id, type, token, body, len, nullptr, 0);
        Message m{};
        copy_header(m, w);
        m.data = body + sizeof(w);  // straight from the receive buffer
        m.size = len - sizeof(w);
        Reply r = resp_.respond_remote(m);
        if (token == 0) return;  // fire and forget (UD)
        // Handled here all the same; only its answer is lost on the link (fault ack-drop).
        if (resp_.answer_lost(m)) return;
        WireResp wr{uint32_t(r.status), r.rnr_timer, {}};
        if (delay_.holding(src))
            hold(src, false, c.id, kResp, token, &wr, sizeof(wr), r.size() ? r.bytes() : nullptr, r.size());
        else
            queue(c, kResp, token, &wr, sizeof(wr), r.size() ? r.bytes() : nullptr, r.size());
    } else if (type == kLidChange && !c.outgoing) {
        if (len != sizeof(WireLidChange)) return;
        WireLidChange w;
        std::memcpy(&w, body, sizeof(w));
        if (w.key != my_lid_ && w.new_lid && w.new_lid < 0xc000)
            apply_lid_change(w.key, w.fabric, w.old_lid, w.new_lid);
    } else if (type == kResp && c.outgoing) {
        if (len < sizeof(WireResp) || dropped_.count(c.peer_lid)) return;
        if (!held && delay_.holding(c.peer_lid))
            return hold(c.peer_lid, true, c.id, type, token, body, len, nullptr, 0);
        WireResp wr;
        std::memcpy(&wr, body, sizeof(wr));
        Reply r;
        r.status = RespStatus(wr.status);
        if (wr.status > uint32_t(RespStatus::Discard)) r.status = RespStatus::RemOp;
        r.rnr_timer = wr.rnr_timer;
        r.ext = body + sizeof(wr);  // borrowed: used before this frame is released
        r.ext_len = len - sizeof(wr);
        comp_.on_remote_reply(token, r);
    }
}

void Network::close_conn(uint32_t id) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, it->second->fd.get(), nullptr);
    if (it->second->outgoing) out_by_lid_.erase(it->second->peer_lid);
    conns_.erase(it);  // requests in flight on it time out at the requester
}

bool Network::set_dropped(const std::string &node, bool dropped) {
    for (auto &n : nodes_)
        if (n.name == node) {
            if (dropped)
                dropped_.insert(n.lid);
            else
                dropped_.erase(n.lid);
            return true;
        }
    return false;
}

}  // namespace simhca
