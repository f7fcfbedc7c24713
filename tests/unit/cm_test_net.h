// SPDX-License-Identifier: BSD-3-Clause
// A fake network for connection manager tests, without MPI or a device: processes on simulated nodes exchange the
// managers' datagrams through a wire that can lose, duplicate, delay and reorder them, over fake QPs that record
// what would reach the device. Net::run() drives everything from one thread; the threaded tests serve datagrams
// and timers from one thread and send and progress from others, so everything the processes' host callbacks
// touch in the network is guarded by Net::mutex (a leaf lock: nothing calls back into a manager under it), and
// each Process has the lock its send queues' users hold (the BTL module's lock), taken by lock_queues().
#pragma once

#include "src/core/connection_manager.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace xrc::cm_test {

inline int fake_post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **);

struct FakeQp {
    ibv_context context{};
    ibv_qp qp{};
    enum class Kind { ini, tgt, handle } kind = Kind::ini;
    std::uint32_t owner_rank = 0;
    std::uint32_t node = 0;
    std::uint32_t peer_qpn = 0;  // INI: the TGT it is connected to; TGT/handle: the INI
    bool connected = false;
    std::uint16_t dlid = 0;  // INI, TGT: the path's destination LID (a handle's is its TGT QP's)
    int migrations = 0;
    std::vector<ibv_send_wr> posted;
    FakeQp() {
        context.ops.post_send = fake_post_send;
        qp.context = &context;
    }
};

inline FakeQp *fake_of(ibv_qp *qp) {
    return reinterpret_cast<FakeQp *>(reinterpret_cast<char *>(qp) - offsetof(FakeQp, qp));
}

inline int fake_post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **) {
    FakeQp *f = fake_of(qp);
    if (!f->connected) return EINVAL;  // posting before RTS would be a bug
    f->posted.push_back(*wr);
    return 0;
}

struct Datagram {
    std::uint32_t from, to;
    CmBytes bytes;
    std::uint64_t due;
};

class Net;

class Process : public CmHost {
public:
    Process(Net &net, std::uint32_t rank, std::uint32_t node, CmConfig config);
    ConnectionManager &cm() { return *cm_; }
    std::uint32_t rank() const { return rank_; }
    const PortAddress &address() const { return address_; }

    const PortAddress *address_of(std::uint32_t rank) noexcept override;
    void send_datagram(const PortAddress &to, const CmBytes &bytes) noexcept override;
    Result<ibv_qp *> create_ini() noexcept override;
    Result<void> connect_ini(ibv_qp *ini, const PortAddress &target, std::uint32_t tgt_qpn) noexcept override;
    Result<ibv_qp *> create_tgt(const PortAddress &initiator, std::uint32_t ini_qpn) noexcept override;
    Result<ibv_qp *> open_tgt(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept override;
    void destroy_qp(ibv_qp *qp) noexcept override;
    void address_moved(std::uint64_t port, std::uint16_t old_lid, std::uint16_t new_lid) noexcept override;
    Result<bool> migrate_path(ibv_qp *qp, std::uint16_t old_lid, std::uint16_t new_lid) noexcept override;
    bool reserve_completions(std::size_t) noexcept override { return true; }
    std::uint64_t now_us() noexcept override;
    void link_failed(const NodeLink &, const std::string &why) noexcept override;
    // CM_NOTES=1 prints every manager's notes (what the BTL logs), to follow a failing test's exchange.
    void note(const std::string &w) noexcept override {
        if (getenv("CM_NOTES")) fprintf(stderr, "note %u: %s\n", rank_, w.c_str());
    }
    void link_revived(const NodeLink &link) noexcept override { revived.push_back(link.node()); }
    void lock_queues() noexcept override { queues_lock.lock(); }
    void unlock_queues() noexcept override { queues_lock.unlock(); }

    // The launcher's node id this process publishes (a label: it may collide with another node's).
    void relabel(std::uint32_t node_id) { address_.node_id = node_id; }
    // The subnet manager gives this process's port a new LID: its datagrams come from it from now on (what the
    // BTL's requery_port then does is the caller's: cm().announce_lid()). Its published address keeps the old one.
    void take_lid(std::uint16_t lid) { address_.lid = lid; }
    std::uint16_t published_lid() const { return published_lid_; }
    // The LID this process's stored address of `rank` says (what it sends to).
    std::uint16_t lid_seen(std::uint32_t rank) { return address_of(rank)->lid; }
    // A peer object for `rank` attached to its node's link (what the BTL's add_procs does).
    Peer &peer(std::uint32_t rank);
    std::vector<std::string> failures;  // under Net::mutex
    void die() {
        cm_.reset();
        dead_ = true;
    }
    bool dead() const { return dead_; }
    std::vector<std::uint32_t> revived;  // the nodes of the links that connect again after they failed
    bool fail_tgt_creation = false;
    // What the BTL module's lock is to the send queues: held by senders and progress around every use of a
    // link's queue, and by the manager's tick() through lock_queues(). Recursive, as the module's lock is.
    std::recursive_mutex queues_lock;

private:
    Net &net_;
    std::uint32_t rank_, node_;
    PortAddress address_;  // the truth: its lid is the port's LID of the moment (the datagrams' source)
    std::uint16_t published_lid_ = 0;
    // What the modex gave this process, as the BTL's job keeps it: published LIDs, moved by address_moved().
    std::map<std::uint32_t, PortAddress> seen_;
    std::map<std::uint64_t, std::uint16_t> moved_;
    std::map<std::uint32_t, std::unique_ptr<Peer>> peers_;
    std::unique_ptr<ConnectionManager> cm_;
    bool dead_ = false;
};

class Net {
public:
    // Guards everything below once several threads drive the processes (see the file's comment).
    std::mutex mutex;
    std::vector<std::unique_ptr<Process>> procs;
    std::deque<Datagram> wire;
    std::uint64_t clock = 1000;
    std::uint32_t next_qpn = 0x100;
    std::map<std::uint32_t, std::unique_ptr<FakeQp>> qps;  // every live QP object (INI, TGT, handles) by address
    std::map<std::uint32_t, int> tgt_users;                // TGT QPN -> handles (creator included)
    std::vector<ibv_send_wr> retired_posts;                // what destroyed INI QPs had posted
    std::function<bool(const Datagram &)> lose = [](const Datagram &) { return false; };
    std::function<int(const Datagram &)> copies = [](const Datagram &) { return 1; };
    std::uint64_t delay_us = 0;
    bool reorder = false;
    std::mt19937 rng{12345};

    // P ranks per node, N nodes, block mapping (ranks n*P .. n*P+P-1 on node n).
    Net(std::uint32_t nodes, std::uint32_t ppn, CmConfig base = {}) {
        for (std::uint32_t n = 0; n < nodes; ++n)
            for (std::uint32_t p = 0; p < ppn; ++p) {
                CmConfig c = base;
                c.my_rank = n * ppn + p;
                c.my_node = n;
                c.jobid = 7;
                c.job_size = nodes * ppn;
                c.local_index = p;
                c.local_count = ppn;
                for (std::uint32_t q = 0; q < ppn; ++q)
                    if (q != p) c.node_mates.push_back(n * ppn + q);
                procs.push_back(std::make_unique<Process>(*this, c.my_rank, n, c));
            }
    }
    ~Net() { procs.clear(); }  // the processes destroy their QPs through the maps below
    Process &operator[](std::uint32_t rank) { return *procs[rank]; }
    // Rank `rank` dies: its manager goes with every QP and handle it held (as the kernel releases a dead process's
    // objects), and datagrams to it are lost. Its address stays known to the others (the modex's).
    void kill(std::uint32_t rank) { procs[rank]->die(); }

    // Delivers until nothing is in flight and no timer wants anything, advancing the clock; bounded.
    void run(std::uint64_t max_us = 120000000) {
        const std::uint64_t end = clock + max_us;
        while (clock < end) {
            bool any = false;
            if (reorder && wire.size() > 1) std::shuffle(wire.begin(), wire.end(), rng);
            std::deque<Datagram> now;
            for (auto it = wire.begin(); it != wire.end();) {
                if (it->due <= clock) {
                    now.push_back(*it);
                    it = wire.erase(it);
                } else {
                    ++it;
                }
            }
            for (const auto &d : now) {
                any = true;
                if (lose(d)) continue;
                for (int c = 0; c < copies(d) && !procs[d.to]->dead(); ++c) {
                    Process &to = *procs[d.to];
                    to.cm().on_datagram(d.bytes, procs[d.from]->address().lid, procs[d.from]->address().cm_qpn);
                }
            }
            for (auto &p : procs)
                if (!p->dead() && p->cm().busy()) {
                    p->cm().tick();
                    any = true;
                }
            if (!any && wire.empty()) return;
            clock += 500;
        }
    }
    std::size_t live_tgts() const {
        std::size_t n = 0;
        for (const auto &[qpn, users] : tgt_users) n += users > 0;
        return n;
    }
    std::size_t live_of(FakeQp::Kind kind) const {
        std::size_t n = 0;
        for (const auto &[key, qp] : qps) n += qp->kind == kind;
        return n;
    }
};

inline Process::Process(Net &net, std::uint32_t rank, std::uint32_t node, CmConfig config)
    : net_(net), rank_(rank), node_(node) {
    address_.lid = static_cast<std::uint16_t>(node + 1);
    address_.port_num = 1;
    address_.mtu = 5;
    address_.node_id = node;
    address_.cm_qpn = 0x10000 + rank;
    address_.token = 0xabc0000000000000ull + rank * 7919 + 1;
    address_.srqs = {{256, 0x500 + rank * 4}, {65536, 0x501 + rank * 4}};
    published_lid_ = address_.lid;
    config.my_token = address_.token;
    config.my_port = port_identity(address_);
    cm_ = std::make_unique<ConnectionManager>(*this, config);
}

inline const PortAddress *Process::address_of(std::uint32_t rank) noexcept {
    if (rank >= net_.procs.size()) return nullptr;
    PortAddress a = net_.procs[rank]->address();
    a.lid = net_.procs[rank]->published_lid();
    if (auto it = moved_.find(port_identity(a)); it != moved_.end()) a.lid = it->second;
    PortAddress &stored = seen_[rank];  // stable: the manager keeps pointers
    stored = a;
    return &stored;
}

inline void Process::address_moved(std::uint64_t port, std::uint16_t, std::uint16_t new_lid) noexcept {
    moved_[port] = new_lid;
    for (auto &[rank, a] : seen_)
        if (port_identity(a) == port) a.lid = new_lid;
}

inline Result<bool> Process::migrate_path(ibv_qp *qp, std::uint16_t old_lid, std::uint16_t new_lid) noexcept {
    std::lock_guard<std::mutex> g(net_.mutex);
    FakeQp *f = fake_of(qp);
    if (f->kind == FakeQp::Kind::handle) {  // one QP, whichever handle moves it
        auto it = net_.qps.find(f->peer_qpn);
        if (it == net_.qps.end()) return Error(ErrorKind::gone, "no such TGT QP");
        f = it->second.get();
    }
    if ((f->kind == FakeQp::Kind::ini && !f->connected) || f->dlid != old_lid) return false;
    f->dlid = new_lid;
    ++f->migrations;
    return true;
}

inline void Process::send_datagram(const PortAddress &to, const CmBytes &bytes) noexcept {
    std::lock_guard<std::mutex> g(net_.mutex);
    const std::uint32_t dst = to.cm_qpn - 0x10000;
    net_.wire.push_back({rank_, dst, bytes, net_.clock + net_.delay_us});
}

inline Result<ibv_qp *> Process::create_ini() noexcept {
    std::lock_guard<std::mutex> g(net_.mutex);
    auto f = std::make_unique<FakeQp>();
    f->kind = FakeQp::Kind::ini;
    f->owner_rank = rank_;
    f->node = node_;
    f->qp.qp_num = net_.next_qpn++;
    ibv_qp *qp = &f->qp;
    net_.qps[qp->qp_num] = std::move(f);
    return qp;
}

inline Result<void> Process::connect_ini(ibv_qp *ini, const PortAddress &target, std::uint32_t tgt_qpn) noexcept {
    std::lock_guard<std::mutex> g(net_.mutex);
    FakeQp *f = fake_of(ini);
    if (net_.tgt_users[tgt_qpn] == 0) return Error(ErrorKind::gone, "no such TGT QP");
    if (target.node_id == node_) return Error(ErrorKind::system, "INI toward its own node");
    f->peer_qpn = tgt_qpn;
    f->connected = true;
    f->dlid = target.lid;
    return {};
}

inline Result<ibv_qp *> Process::create_tgt(const PortAddress &initiator, std::uint32_t ini_qpn) noexcept {
    std::lock_guard<std::mutex> g(net_.mutex);
    if (fail_tgt_creation) return Error(ErrorKind::resource, "out of QPs");
    auto f = std::make_unique<FakeQp>();
    f->kind = FakeQp::Kind::tgt;
    f->owner_rank = rank_;
    f->node = node_;
    f->peer_qpn = ini_qpn;
    f->dlid = initiator.lid;
    f->qp.qp_num = net_.next_qpn++;
    ibv_qp *qp = &f->qp;
    net_.tgt_users[qp->qp_num] = 1;
    net_.qps[qp->qp_num] = std::move(f);
    return qp;
}

inline Result<ibv_qp *> Process::open_tgt(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept {
    std::lock_guard<std::mutex> g(net_.mutex);
    auto it = net_.qps.find(tgt_qpn);
    if (it == net_.qps.end() || net_.tgt_users[tgt_qpn] == 0 || it->second->node != node_ ||
        it->second->peer_qpn != ini_qpn)
        return Error(ErrorKind::gone, "no such TGT QP in this domain");
    auto f = std::make_unique<FakeQp>();
    f->kind = FakeQp::Kind::handle;
    f->owner_rank = rank_;
    f->node = node_;
    f->peer_qpn = tgt_qpn;                      // for handles: the TGT they hold
    f->qp.qp_num = net_.next_qpn++ | 0x800000;  // a handle object of its own (the real QP number is tgt_qpn)
    ++net_.tgt_users[tgt_qpn];
    ibv_qp *qp = &f->qp;
    net_.qps[qp->qp_num] = std::move(f);
    return qp;
}

inline void Process::destroy_qp(ibv_qp *qp) noexcept {
    std::lock_guard<std::mutex> g(net_.mutex);
    FakeQp *f = fake_of(qp);
    if (f->kind == FakeQp::Kind::tgt) --net_.tgt_users[qp->qp_num];
    if (f->kind == FakeQp::Kind::handle) --net_.tgt_users[f->peer_qpn];
    if (f->kind == FakeQp::Kind::ini)
        net_.retired_posts.insert(net_.retired_posts.end(), f->posted.begin(), f->posted.end());
    net_.qps.erase(qp->qp_num);
}

inline std::uint64_t Process::now_us() noexcept {
    std::lock_guard<std::mutex> g(net_.mutex);
    return net_.clock;
}

inline void Process::link_failed(const NodeLink &, const std::string &why) noexcept {
    std::lock_guard<std::mutex> g(net_.mutex);
    failures.push_back(why);
}

inline Peer &Process::peer(std::uint32_t rank) {
    auto &slot = peers_[rank];
    if (!slot) {
        slot = std::make_unique<Peer>();
        const PortAddress &a = net_.procs[rank]->address();
        slot->rank = rank;
        slot->srqs = a.srqs;
        cm_->attach(*slot, cm_->link_for(a, rank));
    }
    return *slot;
}

// A send as the BTL makes it: prepared by the peer, queued on its link's queue.
struct Message {
    SendOp op;
    unsigned char data[16] = {};
    bool done = false;
    ibv_wc_status status = IBV_WC_SUCCESS;
};
inline void message_done(SendOp *op, ibv_wc_status status) noexcept {
    auto *m = reinterpret_cast<Message *>(reinterpret_cast<char *>(op) - offsetof(Message, op));
    m->done = true;
    m->status = status;
}
inline void send(Process &from, std::uint32_t to, Message &m) {
    Peer &p = from.peer(to);
    p.prepare_srq(m.op, m.data, sizeof(m.data), 0, make_imm(0x41));
    m.op.on_complete = message_done;
    ASSERT_EQ(p.queue->post_or_queue(m.op), 0);
}
// Completes everything posted on a link's queue (the HCA's ACKs).
inline void complete_all(NodeLink &link) {
    while (!link.queue().idle()) {
        ibv_wc wc{};
        wc.wr_id = reinterpret_cast<std::uintptr_t>(&link.queue());
        wc.status = IBV_WC_SUCCESS;
        link.queue().on_completion(wc);
    }
}
inline FakeQp *ini_of(NodeLink &link) {
    return link.queue().qp() != nullptr ? fake_of(link.queue().qp()) : nullptr;
}
inline std::uint32_t imm_of(const ibv_send_wr &wr) {
    return ntohl(wr.imm_data);
}

// The serving side's timers of every process, then the datagrams they sent, for `us` of simulated time.
inline void serve_for(Net &net, std::uint64_t us) {
    const std::uint64_t end = net.clock + us;
    while (net.clock < end) {
        for (auto &p : net.procs)
            if (!p->dead()) (void)p->cm().tick_timers();
        const std::uint64_t step_end = net.clock + 100000;
        net.run(100000);
        net.clock = std::max(net.clock, step_end);
    }
}

}  // namespace xrc::cm_test
