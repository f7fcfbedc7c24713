// SPDX-License-Identifier: BSD-3-Clause
// A discrete-event model of a job's connection set-up: one real xrc::ConnectionManager per simulated process,
// each behind a CmHost (SimProcess) over a simulated fabric. The CM is driven only through its public interface
// (link_for, its links' send queues, on_datagram, tick, hold_tgt), as PortTransport drives it.
//
// What is modelled:
//   fabric      a datagram from node a to node b arrives after the link latency (more across leaf switches), or is
//               lost (configurable probability); a process's UD receive queue holds `cm_receives` datagrams and a
//               datagram that finds it full is dropped, as UD does; a buffer is reposted once its datagram is handled.
//   CPU         a process handles its datagrams one at a time: a fixed cost per datagram, plus what the verbs calls
//               it makes cost (QP create/modify/open/destroy: parameters), plus a cost per datagram it posts.
//   progress    when the CM runs: always (a rank in MPI), every X us, after computing S (today: answered only in
//               progress), or at once whatever the application does (a service thread).
//   application at its start each rank posts one message toward every node its pattern sends to (AppModel), the
//               owner of each connection being the first rank of that node it wants (or, with owner=spread, the
//               one eager mode chooses). Completions arrive one round trip after a post. Each receiver of a
//               connection's first messages opens its TGT handle (hold_tgt) when they arrive (optional: it costs
//               memory in the simulator at dense patterns).
// Timers: the real BTL ticks the CM at every progress call; the simulator ticks a process only when that can
// change something: when one of its CONNECTs is due again (it mirrors the CM's backoff: first_retry_us plus
// retry_per_connecting_us per other connection in flight, doubling up to max_retry_us), after completions, after a link
// began to drain, and every `idle_tick` while only CLOSE notices are pending (their retransmissions are not mirrored).
#pragma once

#include "alloc_count.h"
#include "app_model.h"
#include "event_queue.h"
#include "src/core/connection_manager.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace sim {

enum class Progress : std::uint8_t { always, periodic, compute };
enum class OwnerChoice : std::uint8_t { first, spread };

struct SimParams {
    std::uint32_t nodes = 8, ppn = 4;
    Pattern pattern = Pattern::alltoall;
    std::uint32_t random_degree = 8;
    OwnerChoice owner = OwnerChoice::first;
    Progress progress = Progress::always;
    std::uint64_t progress_every_ns = 100000;
    std::uint64_t compute_ns = 0;
    double compute_fraction = 1.0;  // of the ranks, those that compute (chosen by the seed)
    bool service_thread = false;
    std::uint32_t cm_receives = 512;
    double loss = 0;
    std::uint64_t latency_ns = 1000;   // same leaf switch
    std::uint64_t hop_ns = 600;        // added across leaf switches
    std::uint32_t leaf_nodes = 32;     // nodes per leaf switch
    std::uint64_t cm_cost_ns = 1000;   // handling one datagram (poll, decode, validate, repost)
    std::uint64_t post_cost_ns = 250;  // posting one datagram
    std::uint64_t qp_create_ns = 100000;
    std::uint64_t qp_modify_ns = 30000;  // per state transition
    std::uint64_t qp_open_ns = 10000;
    std::uint64_t qp_destroy_ns = 50000;
    std::uint64_t start_spread_ns = 0;  // ranks start (leave MPI_Init) uniformly within this
    std::uint64_t idle_tick_ns = 1000000;
    std::uint64_t end_ns = 600000000000ull;
    bool handles = true;
    std::uint64_t seed = 1;
    xrc::CmConfig cm;  // rank, node, token filled per process
};

struct NodeStats {
    std::int64_t ini = 0, tgt = 0, handles = 0;
    std::int64_t ini_peak = 0, tgt_peak = 0, handles_peak = 0;
    std::uint64_t rq_drops = 0;
};

class World;

class SimProcess final : public xrc::CmHost {
public:
    SimProcess(World &world, std::uint32_t rank, std::uint32_t node);
    ~SimProcess() override;

    const xrc::PortAddress *address_of(std::uint32_t rank) noexcept override;
    void send_datagram(const xrc::PortAddress &to, const xrc::CmBytes &bytes) noexcept override;
    xrc::Result<ibv_qp *> create_ini() noexcept override;
    xrc::Result<void> connect_ini(ibv_qp *ini, const xrc::PortAddress &target, std::uint32_t tgt_qpn) noexcept override;
    xrc::Result<ibv_qp *> create_tgt(const xrc::PortAddress &initiator, std::uint32_t ini_qpn) noexcept override;
    xrc::Result<ibv_qp *> open_tgt(std::uint32_t tgt_qpn, std::uint32_t ini_qpn) noexcept override;
    void destroy_qp(ibv_qp *qp) noexcept override;
    // The simulated fabric never changes a LID: nothing is announced, so nothing moves.
    void address_moved(std::uint64_t, std::uint16_t, std::uint16_t) noexcept override {}
    xrc::Result<bool> migrate_path(ibv_qp *, std::uint16_t, std::uint16_t) noexcept override { return false; }
    bool reserve_completions(std::size_t) noexcept override { return true; }
    std::uint64_t now_us() noexcept override;
    void link_failed(const xrc::NodeLink &link, const std::string &why) noexcept override;
    void note(const std::string &) noexcept override {}

    World &world;
    std::uint32_t rank, node;
    AllocAccount mem;  // the CM's own heap
    std::unique_ptr<xrc::ConnectionManager> cm;
    // UD receive queue: datagrams waiting (a list through the world's datagram pool) plus the one being handled.
    std::uint32_t rq_used = 0, rq_peak = 0;
    std::uint32_t inbox_head = ~0u, inbox_tail = ~0u;
    bool serving = false, holding = false;
    bool computes = false;
    std::uint64_t phase_ns = 0;
    std::uint64_t busy_until = 0;
    std::uint64_t clock = 0, cost = 0;  // during a call into the CM: when it started, what it cost so far
    // Times the CM wants a tick (min-heap), and the one tick event scheduled for them (~0: none).
    std::vector<std::uint64_t> tick_wants;
    std::uint64_t tick_event_at = ~0ull;
    std::uint64_t handled = 0, first_rx = 0, last_rx = 0;
    std::uint32_t failures = 0;
    std::uint32_t connecting = 0;  // links with a CONNECT unanswered, as the CM counts them for its first retry
    struct AppOp {
        xrc::SendOp op;
        SimProcess *proc;
    };
    std::unique_ptr<AppOp[]> ops;
    std::uint32_t ops_posted = 0, ops_done = 0;
};

struct Totals {
    std::uint64_t sent[6] = {};  // by CmType
    std::uint64_t lost = 0, rq_drops = 0;
    std::uint64_t needed_links = 0, connects = 0;
    std::uint64_t last_connect_ns = 0, last_done_ns = 0;
    std::uint64_t ops_posted = 0, ops_done = 0;
    std::uint64_t events = 0;
};

class World {
public:
    explicit World(const SimParams &params);
    ~World();
    void run();

    const SimParams &params() const noexcept { return p_; }
    const AppModel &app() const noexcept { return app_; }
    std::vector<std::unique_ptr<SimProcess>> procs;
    std::vector<xrc::PortAddress> addresses;
    std::vector<NodeStats> nodes;
    Totals totals;
    std::uint64_t queue_peak() const noexcept { return events_.peak(); }

    // --- used by SimProcess and the fake QPs
    struct FakeQp {
        ibv_qp qp;
        std::uint32_t index;
        std::uint32_t proc;
        std::uint32_t dest_node;
        std::uint32_t peer_qpn;  // INI: the TGT it reaches; TGT: the INI; handle: the TGT it holds
        std::uint8_t kind;       // 0 INI, 1 TGT, 2 handle
        bool connected;
        bool live;
    };
    FakeQp *new_qp(std::uint8_t kind, SimProcess &owner);
    void free_qp(FakeQp *qp);
    FakeQp *qp_by_num(std::uint32_t qpn) noexcept;
    static FakeQp *fake_of(ibv_qp *qp) noexcept {
        return reinterpret_cast<FakeQp *>(reinterpret_cast<char *>(qp) - offsetof(FakeQp, qp));
    }
    void transmit(SimProcess &from, std::uint32_t to_rank, const xrc::CmBytes &bytes, std::uint64_t at_ns);
    void posted(FakeQp &ini, const ibv_send_wr &wr);
    std::uint64_t ready_time(const SimProcess &p, std::uint64_t t) const noexcept;
    void want_tick(SimProcess &p, std::uint64_t t);
    std::uint64_t latency(std::uint32_t a, std::uint32_t b) const noexcept;
    std::uint64_t now_ns() const noexcept { return now_; }
    static constexpr std::uint32_t kUdQpnBase = 0x10000;

private:
    enum class Ev : std::uint8_t { start, arrive, serve, tick, complete, hold };
    struct Event {
        Ev kind;
        std::uint32_t proc;
        std::uint32_t a, b;  // arrive: datagram slot; hold: TGT QPN, INI QPN
        std::uint64_t wr_id;
    };
    struct Datagram {
        std::uint32_t from, next;
        xrc::CmBytes bytes;
    };
    void on_start(SimProcess &p, std::uint64_t t);
    void on_arrive(SimProcess &p, std::uint32_t slot, std::uint64_t t);
    void on_serve(SimProcess &p, std::uint64_t t);
    void on_tick(SimProcess &p, std::uint64_t t);
    void run_tick(SimProcess &p, std::uint64_t t);
    // Calls into p's CM at time t: clock and account set, cost collected into busy_until.
    template <class F>
    void call(SimProcess &p, std::uint64_t t, F &&f);

    SimParams p_;
    AppModel app_;
    std::mt19937_64 rng_;
    std::uniform_real_distribution<double> uniform_{0.0, 1.0};
    EventQueue<Event> events_;
    std::vector<Datagram> dgrams_;
    std::vector<std::uint32_t> free_dgrams_;
    std::vector<std::unique_ptr<FakeQp[]>> qp_chunks_;
    std::vector<std::uint32_t> free_qps_;
    std::uint32_t qp_count_ = 0;
    ibv_context context_{};
    struct Attempts {
        std::uint32_t sent;
        std::uint64_t first_retry_us;
    };
    std::unordered_map<std::uint64_t, Attempts> connect_attempts_;  // by (rank, generation)
    std::uint64_t now_ = 0;
};

}  // namespace sim
