// SPDX-License-Identifier: BSD-3-Clause
#include "sim_world.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace sim {

namespace {
constexpr std::uint32_t kNone = ~0u;
constexpr std::uint32_t kQpnBase = 0x100;
constexpr std::uint32_t kQpChunk = 1u << 16;

int fake_post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **bad) {
    World::FakeQp *f = World::fake_of(qp);
    if (!f->connected) {
        *bad = wr;
        return EINVAL;  // posting before RTS would be a bug in the CM
    }
    auto *world = static_cast<World *>(qp->qp_context);
    for (; wr != nullptr; wr = wr->next) world->posted(*f, *wr);
    return 0;
}

std::uint64_t mix(std::uint64_t x) noexcept {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void app_op_done(xrc::SendOp *op, ibv_wc_status status) noexcept {
    auto *a = reinterpret_cast<SimProcess::AppOp *>(reinterpret_cast<char *>(op) - offsetof(SimProcess::AppOp, op));
    SimProcess &p = *a->proc;
    World &w = p.world;
    if (status != IBV_WC_SUCCESS) return;  // failures are counted by link_failed
    ++p.ops_done;
    ++w.totals.ops_done;
    w.totals.last_done_ns = std::max(w.totals.last_done_ns, w.now_ns());
}
}  // namespace

// ------------------------------------------------------------------------------------------------ SimProcess

SimProcess::SimProcess(World &w, std::uint32_t r, std::uint32_t n) : world(w), rank(r), node(n) {
    xrc::CmConfig c = w.params().cm;
    c.my_rank = r;
    c.my_node = n;
    c.jobid = 7;
    c.my_token = w.addresses[r].token;
    c.my_port = xrc::port_identity(w.addresses[r]);
    AllocScope scope(&mem);
    cm = std::make_unique<xrc::ConnectionManager>(*this, c);
}

SimProcess::~SimProcess() {
    AllocScope scope(&mem);
    cm.reset();
}

const xrc::PortAddress *SimProcess::address_of(std::uint32_t r) noexcept {
    return r < world.addresses.size() ? &world.addresses[r] : nullptr;
}

void SimProcess::send_datagram(const xrc::PortAddress &to, const xrc::CmBytes &bytes) noexcept {
    AllocScope none(nullptr);
    cost += world.params().post_cost_ns;
    world.transmit(*this, to.cm_qpn - World::kUdQpnBase, bytes, clock + cost);
}

xrc::Result<ibv_qp *> SimProcess::create_ini() noexcept {
    AllocScope none(nullptr);
    cost += world.params().qp_create_ns;
    World::FakeQp *f = world.new_qp(0, *this);
    return &f->qp;
}

xrc::Result<void> SimProcess::connect_ini(ibv_qp *ini, const xrc::PortAddress &target, std::uint32_t tgt_qpn) noexcept {
    AllocScope none(nullptr);
    cost += 2 * world.params().qp_modify_ns;
    World::FakeQp *f = World::fake_of(ini);
    World::FakeQp *t = world.qp_by_num(tgt_qpn);
    if (t == nullptr || t->kind != 1 || t->peer_qpn != ini->qp_num)
        return xrc::Error(xrc::ErrorKind::gone, "no such TGT QP toward this INI QP");
    f->peer_qpn = tgt_qpn;
    f->dest_node = target.node_id;
    f->connected = true;
    ++world.totals.connects;
    world.totals.last_connect_ns = std::max(world.totals.last_connect_ns, clock + cost);
    return {};
}

xrc::Result<ibv_qp *> SimProcess::create_tgt(const xrc::PortAddress &, std::uint32_t ini_qpn) noexcept {
    AllocScope none(nullptr);
    cost += world.params().qp_create_ns + 3 * world.params().qp_modify_ns;  // RESET->INIT->RTR->RTS
    World::FakeQp *f = world.new_qp(1, *this);
    f->peer_qpn = ini_qpn;
    f->connected = true;
    return &f->qp;
}

xrc::Result<ibv_qp *> SimProcess::open_tgt(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept {
    AllocScope none(nullptr);
    cost += world.params().qp_open_ns;
    World::FakeQp *t = world.qp_by_num(tgt_qpn);
    if (t == nullptr || t->kind != 1 || world.procs[t->proc]->node != node || t->peer_qpn != ini_qpn)
        return xrc::Error(xrc::ErrorKind::gone, "no such TGT QP in this domain");
    World::FakeQp *h = world.new_qp(2, *this);
    h->peer_qpn = tgt_qpn;
    h->qp.qp_num = tgt_qpn;  // ibv_open_qp: the same QP, a handle of our own
    return &h->qp;
}

void SimProcess::destroy_qp(ibv_qp *qp) noexcept {
    AllocScope none(nullptr);
    cost += world.params().qp_destroy_ns;
    world.free_qp(World::fake_of(qp));
}

std::uint64_t SimProcess::now_us() noexcept {
    return clock / 1000;
}

void SimProcess::link_failed(const xrc::NodeLink &link, const std::string &why) noexcept {
    AllocScope none(nullptr);
    if (failures++ == 0)
        std::fprintf(stderr, "cm-sim: rank %u: link to node %u failed at %.3f s: %s\n", rank, link.node(),
                     double(clock) / 1e9, why.c_str());
}

// ------------------------------------------------------------------------------------------------ World

World::World(const SimParams &params)
    : p_(params), app_(params.pattern, params.nodes, params.ppn, params.random_degree, params.seed), rng_(params.seed) {
    context_.ops.post_send = fake_post_send;
    const std::uint32_t ranks = p_.nodes * p_.ppn;
    nodes.resize(p_.nodes);
    addresses.resize(ranks);
    for (std::uint32_t r = 0; r < ranks; ++r) {
        xrc::PortAddress &a = addresses[r];
        a.lid = static_cast<std::uint16_t>(r / p_.ppn + 1);
        a.port_num = 1;
        a.mtu = 5;
        a.node_id = r / p_.ppn;
        a.cm_qpn = kUdQpnBase + r;
        a.token = mix(p_.seed * 0x100000001ull + r) | 1;
        a.srqs = {{256, 0x500 + r}};
    }
    procs.reserve(ranks);
    for (std::uint32_t r = 0; r < ranks; ++r) procs.push_back(std::make_unique<SimProcess>(*this, r, r / p_.ppn));
    std::vector<std::uint32_t> dests;
    for (auto &pp : procs) {
        SimProcess &p = *pp;
        p.computes = p_.progress == Progress::compute && uniform_(rng_) < p_.compute_fraction;
        p.phase_ns = p_.progress_every_ns > 0 ? mix(p_.seed ^ (0x5eedull << 32) ^ p.rank) % p_.progress_every_ns : 0;
        const std::uint64_t start = p_.start_spread_ns > 0 ? rng_() % p_.start_spread_ns : 0;
        events_.push(start, Event{Ev::start, p.rank, 0, 0, 0});
    }
}

World::~World() {
    procs.clear();
}

std::uint64_t World::latency(std::uint32_t a, std::uint32_t b) const noexcept {
    return p_.latency_ns + (a / p_.leaf_nodes != b / p_.leaf_nodes ? p_.hop_ns : 0);
}

std::uint64_t World::ready_time(const SimProcess &p, std::uint64_t t) const noexcept {
    if (p_.service_thread) return t;
    switch (p_.progress) {
        case Progress::always:
            return t;
        case Progress::compute:
            return p.computes ? std::max(t, p_.compute_ns) : t;
        case Progress::periodic: {
            const std::uint64_t x = p_.progress_every_ns;
            if (x == 0) return t;
            const std::uint64_t k = t <= p.phase_ns ? 0 : (t - p.phase_ns + x - 1) / x;
            return p.phase_ns + k * x;
        }
    }
    return t;
}

World::FakeQp *World::new_qp(std::uint8_t kind, SimProcess &owner) {
    std::uint32_t index;
    if (!free_qps_.empty()) {
        index = free_qps_.back();
        free_qps_.pop_back();
    } else {
        index = qp_count_++;
        if (kQpnBase + index >= (1u << 24)) {
            std::fprintf(stderr, "cm-sim: more than 2^24 QPs live at once: QP numbers are 24 bits\n");
            std::abort();
        }
        if (index / kQpChunk >= qp_chunks_.size()) qp_chunks_.push_back(std::make_unique<FakeQp[]>(kQpChunk));
    }
    FakeQp &f = qp_chunks_[index / kQpChunk][index % kQpChunk];
    f = FakeQp{};
    f.index = index;
    f.qp.context = &context_;
    f.qp.qp_context = this;
    f.qp.qp_num = kQpnBase + index;
    f.proc = owner.rank;
    f.kind = kind;
    f.live = true;
    NodeStats &n = nodes[owner.node];
    if (kind == 0) n.ini_peak = std::max(n.ini_peak, ++n.ini);
    if (kind == 1) n.tgt_peak = std::max(n.tgt_peak, ++n.tgt);
    if (kind == 2) n.handles_peak = std::max(n.handles_peak, ++n.handles);
    return &f;
}

void World::free_qp(FakeQp *f) {
    NodeStats &n = nodes[procs[f->proc]->node];
    if (f->kind == 0) --n.ini;
    if (f->kind == 1) --n.tgt;
    if (f->kind == 2) --n.handles;
    f->live = false;
    f->connected = false;
    free_qps_.push_back(f->index);
}

World::FakeQp *World::qp_by_num(std::uint32_t qpn) noexcept {
    if (qpn < kQpnBase || qpn - kQpnBase >= qp_count_) return nullptr;
    const std::uint32_t index = qpn - kQpnBase;
    FakeQp &f = qp_chunks_[index / kQpChunk][index % kQpChunk];
    return f.live && f.kind != 2 ? &f : nullptr;
}

void World::transmit(SimProcess &from, std::uint32_t to_rank, const xrc::CmBytes &bytes, std::uint64_t at_ns) {
    if (const auto decoded = xrc::decode_cm(bytes)) {
        const xrc::CmMessage &m = *decoded;
        const auto type = static_cast<std::size_t>(m.type);
        if (type < 6) ++totals.sent[type];
        if (m.type == xrc::CmType::Connect) {
            // Mirror the CM's backoff: tick the sender when this CONNECT is due again.
            const xrc::CmConfig &c = p_.cm;
            auto [it, fresh] = connect_attempts_.try_emplace((std::uint64_t{from.rank} << 32) | m.generation);
            if (fresh) {
                it->second.sent = 0;
                it->second.first_retry_us = std::min(c.first_retry_us + from.connecting * c.retry_per_connecting_us,
                                                     std::max(c.first_retry_us, c.max_retry_us));
                ++from.connecting;
            }
            const std::uint64_t shift = std::min<std::uint32_t>(it->second.sent++, 30);
            const std::uint64_t retry_us = std::min(it->second.first_retry_us << shift, c.max_retry_us);
            want_tick(from, (from.clock / 1000 + retry_us) * 1000);
        }
    }
    if (to_rank >= procs.size()) return;
    if (p_.loss > 0 && uniform_(rng_) < p_.loss) {
        ++totals.lost;
        return;
    }
    std::uint32_t slot;
    if (!free_dgrams_.empty()) {
        slot = free_dgrams_.back();
        free_dgrams_.pop_back();
    } else {
        slot = static_cast<std::uint32_t>(dgrams_.size());
        dgrams_.emplace_back();
    }
    dgrams_[slot].from = from.rank;
    dgrams_[slot].next = kNone;
    dgrams_[slot].bytes = bytes;
    events_.push(at_ns + latency(from.node, procs[to_rank]->node), Event{Ev::arrive, to_rank, slot, 0, 0});
}

void World::posted(FakeQp &ini, const ibv_send_wr &wr) {
    AllocScope none(nullptr);  // the simulator's events, not the CM's memory
    SimProcess &p = *procs[ini.proc];
    const std::uint64_t t = p.clock + p.cost;
    const std::uint64_t one_way = latency(p.node, ini.dest_node);
    if (wr.send_flags & IBV_SEND_SIGNALED)
        events_.push(ready_time(p, t + 2 * one_way), Event{Ev::complete, p.rank, 0, 0, wr.wr_id});
    if (!p_.handles || wr.opcode != IBV_WR_SEND_WITH_IMM || (ntohl(wr.imm_data) & xrc::kImmNop)) return;
    std::vector<std::uint32_t> receivers;
    app_.destinations_on(p.rank, ini.dest_node, receivers);
    for (std::uint32_t r : receivers)
        events_.push(ready_time(*procs[r], t + one_way), Event{Ev::hold, r, ini.peer_qpn, ini.qp.qp_num, 0});
}

void World::want_tick(SimProcess &p, std::uint64_t t) {
    t = std::max(t, now_);
    p.tick_wants.push_back(t);
    std::push_heap(p.tick_wants.begin(), p.tick_wants.end(), std::greater<>());
    const std::uint64_t at = ready_time(p, t);
    if (at < p.tick_event_at) {  // the later event, if any, is ignored when it fires
        p.tick_event_at = at;
        events_.push(at, Event{Ev::tick, p.rank, 0, 0, 0});
    }
}

template <class F>
void World::call(SimProcess &p, std::uint64_t t, F &&f) {
    p.clock = t;
    p.cost = 0;
    const std::uint64_t evictions = p.cm->counters().evictions;
    {
        AllocScope scope(&p.mem);
        f();
    }
    p.busy_until = std::max(p.busy_until, t + p.cost);
    // A link began to drain: the next progress call's tick closes it once its queue is idle.
    if (p.cm->counters().evictions != evictions) want_tick(p, p.busy_until);
}

void World::on_start(SimProcess &p, std::uint64_t t) {
    std::vector<std::uint32_t> dests;
    app_.destinations(p.rank, dests);
    // One message toward each remote node, in first-send order; the link's owner is the first rank of that node
    // the process wants (what attach() does on demand), or eager mode's choice.
    std::vector<std::uint32_t> order;  // node, owner pairs
    {
        std::vector<bool> seen(p_.nodes, false);
        for (std::uint32_t r : dests) {
            const std::uint32_t n = r / p_.ppn;
            if (n == p.node || seen[n]) continue;
            seen[n] = true;
            order.push_back(n);
            order.push_back(p_.owner == OwnerChoice::first ? r : n * p_.ppn + p.rank % p_.ppn);
        }
    }
    const std::uint32_t links = static_cast<std::uint32_t>(order.size() / 2);
    p.ops = std::make_unique<SimProcess::AppOp[]>(links);
    totals.needed_links += links;
    call(p, std::max(t, p.busy_until), [&] {
        for (std::uint32_t i = 0; i < links; ++i) {
            SimProcess::AppOp &a = p.ops[i];
            a.proc = &p;
            a.op.on_complete = app_op_done;
            a.op.wr.opcode = IBV_WR_SEND_WITH_IMM;
            a.op.wr.imm_data = htonl(xrc::make_imm(0x41) | xrc::kImmFirst);
            a.op.wr.num_sge = 0;
            const std::uint32_t owner = order[2 * i + 1];
            xrc::NodeLink &link = p.cm->link_for(addresses[owner], owner);
            ++p.ops_posted;
            ++totals.ops_posted;
            (void)link.queue().post_or_queue(a.op);
        }
    });
    // The first send to a node only records the link: the next progress call's tick makes its INI QP.
    if (p.cm->busy()) want_tick(p, p.busy_until);
}

void World::on_arrive(SimProcess &p, std::uint32_t slot, std::uint64_t t) {
    if (p.rq_used >= p_.cm_receives) {
        ++totals.rq_drops;
        ++nodes[p.node].rq_drops;
        free_dgrams_.push_back(slot);
        return;
    }
    p.rq_peak = std::max(p.rq_peak, ++p.rq_used);
    if (p.inbox_tail == kNone)
        p.inbox_head = slot;
    else
        dgrams_[p.inbox_tail].next = slot;
    p.inbox_tail = slot;
    if (!p.serving) {
        p.serving = true;
        events_.push(std::max(ready_time(p, t), p.busy_until), Event{Ev::serve, p.rank, 0, 0, 0});
    }
}

void World::on_serve(SimProcess &p, std::uint64_t t) {
    if (p.holding) {  // the buffer of the datagram handled last goes back to the receive queue
        --p.rq_used;
        p.holding = false;
    }
    if (p.inbox_head == kNone) {
        p.serving = false;
        return;
    }
    if (t < p.busy_until) {  // a tick or a start took the CPU meanwhile
        events_.push(p.busy_until, Event{Ev::serve, p.rank, 0, 0, 0});
        return;
    }
    // A progress call handles a datagram, then ticks: a backlog of datagrams does not hold up retransmissions.
    if (p.tick_event_at <= t) {
        run_tick(p, t);
        if (t < p.busy_until) {
            events_.push(p.busy_until, Event{Ev::serve, p.rank, 0, 0, 0});
            return;
        }
    }
    const std::uint32_t slot = p.inbox_head;
    p.inbox_head = dgrams_[slot].next;
    if (p.inbox_head == kNone) p.inbox_tail = kNone;
    p.holding = true;
    const xrc::PortAddress &from = addresses[dgrams_[slot].from];
    const xrc::CmBytes bytes = dgrams_[slot].bytes;
    free_dgrams_.push_back(slot);
    if (p.handled++ == 0) p.first_rx = t;
    p.last_rx = t;
    call(p, t, [&] {
        p.cost += p_.cm_cost_ns;
        p.cm->on_datagram(bytes, from.lid, from.cm_qpn);
    });
    // What the datagram asked of progress (opening an accepted link's queue, connecting back) waits for a tick.
    if (p.cm->busy()) want_tick(p, p.busy_until);
    if (const auto m = xrc::decode_cm(bytes); m && (m->type == xrc::CmType::Accept || m->type == xrc::CmType::Reject))
        if (connect_attempts_.erase((std::uint64_t{p.rank} << 32) | m->generation) != 0) --p.connecting;
    events_.push(p.busy_until, Event{Ev::serve, p.rank, 0, 0, 0});
}

void World::on_tick(SimProcess &p, std::uint64_t t) {
    if (t != p.tick_event_at) return;  // superseded by an earlier one
    if (t < p.busy_until) {            // after what the process is doing now
        p.tick_event_at = p.busy_until;
        events_.push(p.busy_until, Event{Ev::tick, p.rank, 0, 0, 0});
        return;
    }
    run_tick(p, t);
}

void World::run_tick(SimProcess &p, std::uint64_t t) {
    p.tick_event_at = ~0ull;
    auto &wants = p.tick_wants;
    while (!wants.empty() && wants.front() <= t) {
        std::pop_heap(wants.begin(), wants.end(), std::greater<>());
        wants.pop_back();
    }
    if (p.cm->busy()) call(p, t, [&] { p.cm->tick(); });
    // Only CLOSE notices left: they are retransmitted on the CM's backoff, which ticks here do not mirror.
    if (p.cm->busy() && p.cm->drained()) want_tick(p, t + p_.idle_tick_ns);
    if (!wants.empty() && p.tick_event_at == ~0ull) {
        p.tick_event_at = ready_time(p, wants.front());
        events_.push(p.tick_event_at, Event{Ev::tick, p.rank, 0, 0, 0});
    }
}

void World::run() {
    Event e;
    while (!events_.empty()) {
        const std::uint64_t t = events_.pop(e);
        if (t > p_.end_ns) break;
        now_ = t;
        ++totals.events;
        SimProcess &p = *procs[e.proc];
        switch (e.kind) {
            case Ev::start:
                on_start(p, t);
                break;
            case Ev::arrive:
                on_arrive(p, e.a, t);
                break;
            case Ev::serve:
                on_serve(p, t);
                break;
            case Ev::tick:
                on_tick(p, t);
                break;
            case Ev::complete: {
                ibv_wc wc{};
                wc.wr_id = e.wr_id;
                wc.status = IBV_WC_SUCCESS;
                call(p, t, [&] { (void)xrc::send_queue_of(e.wr_id)->on_completion(wc); });
                if (p.cm->busy()) want_tick(p, t);
                break;
            }
            case Ev::hold:
                call(p, t, [&] { p.cm->hold_tgt(e.a, e.b); });
                break;
        }
    }
}

}  // namespace sim
