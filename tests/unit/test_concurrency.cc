// SPDX-License-Identifier: BSD-3-Clause
// The core's shared classes driven from several threads the way the BTL drives them under MPI_THREAD_MULTIPLE
// and with its service thread (docs/connections.md, "Threads: which thread touches what"): meant to run under
// ThreadSanitizer (configure --enable-tsan), and checking outcomes in every build, not only the absence of
// crashes. Sizes are iteration counts small enough for a loaded machine under TSan; nothing here is timed.
#include "cm_test_net.h"
#include "src/core/eager_rdma.h"
#include "src/core/port_health.h"
#include "src/core/send_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

using namespace xrc;
using namespace xrc::cm_test;

namespace {

// Waits (yielding) until `done` holds, at most `rounds` times: a bound in iterations, so a hang fails the test.
template <class F>
bool wait_for(F &&done, long rounds = 20000000) {
    for (long i = 0; i < rounds; ++i) {
        if (done()) return true;
        std::this_thread::yield();
    }
    return done();
}

// ---- the connection manager ------------------------------------------------------------------------------------

// One message of the stress: its completion is counted, so "exactly once" can be checked.
struct CountedMessage {
    SendOp op;
    std::uint64_t payload = 0;
    std::atomic<int> completions{0};
    std::atomic<int> failures{0};
};
void counted_done(SendOp *op, ibv_wc_status status) noexcept {
    auto *m = reinterpret_cast<CountedMessage *>(reinterpret_cast<char *>(op) - offsetof(CountedMessage, op));
    m->completions.fetch_add(1, std::memory_order_relaxed);
    if (status != IBV_WC_SUCCESS) m->failures.fetch_add(1, std::memory_order_relaxed);
}

// The distinct send queues a process's peers use (one per remote node).
std::vector<SendQueue *> queues_of(Process &p, const std::vector<std::uint32_t> &ranks) {
    std::set<SendQueue *> queues;
    for (std::uint32_t r : ranks) queues.insert(p.peer(r).queue);
    return {queues.begin(), queues.end()};
}

// Progress's completion polling: the fake HCA completes everything posted (under the module's lock, as the BTL
// polls its CQ under it). A completion names the queue; it retires up to the oldest signaled request.
void complete_posted(Process &p, const std::vector<SendQueue *> &queues) {
    std::lock_guard<std::recursive_mutex> g(p.queues_lock);
    for (SendQueue *q : queues)
        while (!q->idle()) {
            ibv_wc wc{};
            wc.wr_id = reinterpret_cast<std::uintptr_t>(q);
            wc.status = IBV_WC_SUCCESS;
            q->on_completion(wc);
        }
}

// The service thread: serves every process's datagrams and timers (PortTransport::serve_cm), advancing the fake
// clock only when the wire is quiet so that a loaded machine cannot make a retransmission storm of it.
class Service {
public:
    explicit Service(Net &net) : net_(net), thread_([this] { run(); }) {}
    ~Service() { stop(); }
    void stop() {
        stop_.store(true);
        if (thread_.joinable()) thread_.join();
    }

private:
    void run() {
        while (!stop_.load()) {
            std::deque<Datagram> now;
            {
                std::lock_guard<std::mutex> g(net_.mutex);
                now.swap(net_.wire);
                if (now.empty()) net_.clock += 500;
            }
            for (const auto &d : now) {
                const PortAddress &from = net_.procs[d.from]->address();
                net_.procs[d.to]->cm().on_datagram(d.bytes, from.lid, from.cm_qpn);
            }
            for (auto &p : net_.procs) p->cm().tick_timers();
            std::this_thread::yield();
        }
    }
    Net &net_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

// 3 nodes x 2 ranks, every rank sending to every rank of the other nodes, then finalizing. `max_ini_qps` 1: every
// process alternates between two nodes under a cap of one connection, so links are evicted (drained, fenced,
// closed) and made again all along, while sends queue on them.
void stress_connection_manager(std::uint32_t max_ini_qps) {
    constexpr std::uint32_t kNodes = 3, kPpn = 2, kRanks = kNodes * kPpn, kPerPeer = 24;
    CmConfig base;
    base.max_ini_qps = max_ini_qps;
    // The clock runs with the service loop, which a loaded machine may spin far ahead of the other threads: this
    // test is about threads, not about giving up, so no connection may time out here.
    base.connect_timeout_us = 3600ull * 1000000;
    Net net(kNodes, kPpn, base);

    // add_procs, before any thread runs: every process has a peer for every rank on another node.
    std::vector<std::vector<std::uint32_t>> remote(kRanks);
    for (std::uint32_t r = 0; r < kRanks; ++r)
        for (std::uint32_t t = 0; t < kRanks; ++t)
            if (t / kPpn != r / kPpn) {
                remote[r].push_back(t);
                net[r].peer(t);
            }
    std::vector<std::vector<SendQueue *>> queues(kRanks);
    for (std::uint32_t r = 0; r < kRanks; ++r) queues[r] = queues_of(net[r], remote[r]);

    // messages[r][i]: the i-th message rank r sends (round robin over its remote peers).
    std::vector<std::vector<std::unique_ptr<CountedMessage>>> messages(kRanks);
    for (std::uint32_t r = 0; r < kRanks; ++r)
        for (std::uint32_t i = 0; i < kPerPeer * remote[r].size(); ++i) {
            auto m = std::make_unique<CountedMessage>();
            m->payload = (std::uint64_t(r) << 32) | i;
            messages[r].push_back(std::move(m));
        }

    std::atomic<int> senders_left{kRanks};
    std::atomic<bool> stop_progress{false};
    {
        Service service(net);
        std::vector<std::thread> threads;
        for (std::uint32_t r = 0; r < kRanks; ++r) {
            // A sender: every send under the module's lock, as btl_send does. The first round (one message per
            // peer) queues and starts the connections through the queues' "blocked" hook; the sender waits for
            // those to complete, so the rest is posted on open queues while progress completes and the service
            // thread still answers the connections made back toward this process.
            threads.emplace_back([&, r] {
                Process &p = net[r];
                const std::size_t first_round = remote[r].size();
                for (std::uint32_t i = 0; i < messages[r].size(); ++i) {
                    if (i == first_round) {
                        EXPECT_TRUE(wait_for([&] {
                            for (std::size_t k = 0; k < first_round; ++k)
                                if (messages[r][k]->completions.load() == 0) return false;
                            return true;
                        }));
                    }
                    CountedMessage &m = *messages[r][i];
                    std::lock_guard<std::recursive_mutex> g(p.queues_lock);
                    Peer &peer = p.peer(remote[r][i % remote[r].size()]);
                    peer.prepare_srq(m.op, &m.payload, sizeof(m.payload), 0, make_imm(0x41));
                    m.op.on_complete = counted_done;
                    EXPECT_EQ(peer.queue->post_or_queue(m.op), 0);
                }
                senders_left.fetch_sub(1);
            });
            // Progress: the manager's tick() outside the module's lock, completions under it.
            threads.emplace_back([&, r] {
                Process &p = net[r];
                while (!stop_progress.load()) {
                    if (p.cm().busy()) p.cm().tick();
                    complete_posted(p, queues[r]);
                    std::this_thread::yield();
                }
            });
        }
        const bool all_done = wait_for([&] {
            if (senders_left.load() != 0) return false;
            for (const auto &per_rank : messages)
                for (const auto &m : per_rank)
                    if (m->completions.load() == 0) return false;
            return true;
        });
        stop_progress.store(true);
        for (auto &t : threads) t.join();
        service.stop();
        ASSERT_TRUE(all_done) << "sends still outstanding";
    }

    // Every message completed once, successfully, and reached the device once (on the INI QP of its node's link
    // then, possibly closed since), toward its receiver's SRQ.
    std::map<std::uint64_t, int> posted;  // payload address -> times posted
    auto count_posted = [&](const ibv_send_wr &wr) {
        if (wr.num_sge > 0) ++posted[wr.sg_list->addr];  // (a drain's fence carries no data)
    };
    for (const ibv_send_wr &wr : net.retired_posts) count_posted(wr);
    // holds[rank]: (TGT QPN, INI QPN) of the connections its first messages came through. Sized before the
    // threads read it.
    std::vector<std::vector<std::pair<std::uint32_t, std::uint32_t>>> holds(kRanks);
    for (std::uint32_t r = 0; r < kRanks; ++r) {
        EXPECT_TRUE(net[r].failures.empty()) << net[r].failures.front();
        for (const auto &m : messages[r]) {
            EXPECT_EQ(m->completions.load(), 1);
            EXPECT_EQ(m->failures.load(), 0);
        }
        for (SendQueue *q : queues[r]) {
            const NodeLink *link = net[r].cm().link_of(*q);
            ASSERT_NE(link, nullptr);
            if (max_ini_qps == 0) {
                ASSERT_EQ(link->state(), NodeLink::State::connected);
            }
            if (link->state() != NodeLink::State::connected) continue;
            for (const ibv_send_wr &wr : fake_of(q->qp())->posted) {
                count_posted(wr);
                const std::uint32_t receiver = (wr.qp_type.xrc.remote_srqn - 0x500) / 4;
                if (imm_of(wr) & kImmFirst) holds[receiver].emplace_back(link->tgt_qpn(), link->ini_qpn());
            }
        }
    }
    std::size_t sent = 0;
    for (std::uint32_t r = 0; r < kRanks; ++r)
        for (const auto &m : messages[r]) {
            ++sent;
            EXPECT_EQ(posted[reinterpret_cast<std::uintptr_t>(&m->payload)], 1);
        }
    EXPECT_EQ(posted.size(), sent);
    // One connection per (process, remote node), or as many as the cap allows.
    if (max_ini_qps == 0)
        EXPECT_EQ(net.live_of(FakeQp::Kind::ini), std::size_t(kRanks * (kNodes - 1)));
    else
        EXPECT_LE(net.live_of(FakeQp::Kind::ini), std::size_t(kRanks * max_ini_qps));
    if (max_ini_qps != 0) {
        std::uint64_t evictions = 0;
        for (std::uint32_t r = 0; r < kRanks; ++r) evictions += net[r].cm().counters().evictions;
        EXPECT_GT(evictions, 0u);
    }

    // Finalize, threaded as well: every receiver first opens its handles on the TGT QPs its first messages came
    // through (progress's hold_tgt) while the others do the same, then all drain and close while the service
    // thread answers; nothing may be left: no INI QP, no TGT QP, no handle.
    std::atomic<int> holding{kRanks};
    std::atomic<bool> all_finished{false};
    {
        Service service(net);
        std::vector<std::thread> threads;
        for (std::uint32_t r = 0; r < kRanks; ++r)
            threads.emplace_back([&, r] {
                Process &p = net[r];
                for (const auto &[tgt, ini] : holds[r]) p.cm().hold_tgt(tgt, ini);
                holding.fetch_sub(1);
                while (holding.load() != 0) std::this_thread::yield();
                p.cm().begin_finalize();
                while (!all_finished.load()) {
                    if (p.cm().busy()) p.cm().tick();
                    complete_posted(p, queues[r]);
                    std::this_thread::yield();
                }
            });
        const bool finished = wait_for([&] {
            for (auto &p : net.procs)
                if (!p->cm().finished()) return false;
            return true;
        });
        all_finished.store(true);
        for (auto &t : threads) t.join();
        service.stop();
        ASSERT_TRUE(finished) << "finalize did not finish";
    }
    EXPECT_EQ(net.live_of(FakeQp::Kind::ini), 0u);
    EXPECT_EQ(net.live_of(FakeQp::Kind::handle), 0u);
    EXPECT_EQ(net.live_tgts(), 0u);
    for (std::uint32_t r = 0; r < kRanks; ++r) EXPECT_TRUE(net[r].failures.empty());
}

TEST(Concurrency, ConnectionManagerServedWhileSendersAndProgressRun) {
    stress_connection_manager(0);
}

TEST(Concurrency, ConnectionManagerEvictsUnderACapWhileSendersAndProgressRun) {
    stress_connection_manager(1);
}

// ---- SendQueue under the module's lock ------------------------------------------------------------------------

// The device behind one QP: what was posted, in order, completed later by whoever polls.
struct SharedFakeQp {
    ibv_context context{};
    ibv_qp qp{};
    std::vector<std::uint64_t> posted_wr_ids;  // under the module's lock (posting happens under it)
    std::vector<bool> posted_signaled;
    SharedFakeQp();
};
SharedFakeQp *shared_fake_of(ibv_qp *qp) {
    return reinterpret_cast<SharedFakeQp *>(reinterpret_cast<char *>(qp) - offsetof(SharedFakeQp, qp));
}
int shared_post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **) {
    SharedFakeQp *f = shared_fake_of(qp);
    f->posted_wr_ids.push_back(wr->wr_id);
    f->posted_signaled.push_back((wr->send_flags & IBV_SEND_SIGNALED) != 0);
    return 0;
}
SharedFakeQp::SharedFakeQp() {
    context.ops.post_send = shared_post_send;
    qp.context = &context;
}

struct StressOp {
    SendOp op;
    std::atomic<int> completions{0};
};
void stress_done(SendOp *op, ibv_wc_status status) noexcept {
    auto *s = reinterpret_cast<StressOp *>(reinterpret_cast<char *>(op) - offsetof(StressOp, op));
    if (status == IBV_WC_SUCCESS) s->completions.fetch_add(1, std::memory_order_relaxed);
}

TEST(Concurrency, SendQueueFromFourThreadsUnderTheModuleLock) {
    constexpr int kThreads = 4, kPerThread = 3000;
    std::mutex module_lock;
    SharedFakeQp fake;
    SendQueue queue(64, 8, 1);  // small: credits run out, sends queue, completions drain them
    queue.open(&fake.qp);
    std::vector<std::unique_ptr<StressOp>> ops(kThreads * kPerThread);
    for (auto &o : ops) o = std::make_unique<StressOp>();
    std::size_t next_completion = 0;  // index into the fake's posted list: what the "HCA" completes next
    std::atomic<int> posters_left{kThreads};

    // Progress as the BTL's: completions of the signaled requests, in order, under the module's lock.
    auto poll = [&] {
        std::lock_guard<std::mutex> g(module_lock);
        while (next_completion < fake.posted_wr_ids.size()) {
            const bool signaled = fake.posted_signaled[next_completion];
            const std::uint64_t wr_id = fake.posted_wr_ids[next_completion++];
            if (!signaled) continue;  // no completion of its own: a later signaled one retires it
            ibv_wc wc{};
            wc.wr_id = wr_id;
            wc.status = IBV_WC_SUCCESS;
            EXPECT_EQ(send_queue_of(wc.wr_id), &queue);
            queue.on_completion(wc);
        }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < kPerThread; ++i) {
                StressOp &s = *ops[t * kPerThread + i];
                {
                    std::lock_guard<std::mutex> g(module_lock);
                    s.op.wr.opcode = IBV_WR_SEND;
                    // Every third one is fire-and-forget (an inline send nobody waits for); try_post first as
                    // sendi does, post_or_queue when it cannot go out now, as send does.
                    s.op.on_complete = i % 3 == 0 ? nullptr : stress_done;
                    const int rc = s.op.on_complete == nullptr ? queue.try_post(s.op) : EAGAIN;
                    if (rc == EAGAIN) {
                        s.op.on_complete = stress_done;
                        EXPECT_EQ(queue.post_or_queue(s.op), 0);
                    } else {
                        EXPECT_EQ(rc, 0);
                        s.completions.fetch_add(1, std::memory_order_relaxed);  // gone, nobody to call back
                    }
                }
                if (i % 4 == t % 4) poll();  // every thread also progresses, as ob1's threads do
            }
            posters_left.fetch_sub(1);
        });
    const bool drained = wait_for([&] {
        poll();
        std::lock_guard<std::mutex> g(module_lock);
        // Fire-and-forget requests at the very end may stay unsignaled, outstanding until a later send retires
        // them (the BTL's flush posts one): everything that waits for a callback must be done.
        return posters_left.load() == 0 && queue.outstanding_callbacks() == 0 && !queue.has_pending();
    });
    for (auto &t : threads) t.join();
    ASSERT_TRUE(drained);
    EXPECT_EQ(fake.posted_wr_ids.size(), ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) ASSERT_EQ(ops[i]->completions.load(), 1) << "op " << i;
}

// ---- the eager ring: writer and reader on two threads ---------------------------------------------------------

// The ring's memory and the reader's credit word, as two processes' registered memory. The writer thread plays
// the sender's HCA too: its "RDMA WRITE" places the bytes in increasing address order, so the sequence number,
// the last word, lands last (a release store here; the reader's peek() loads it with acquire).
TEST(Concurrency, EagerRingOneWriterOneReader) {
    constexpr std::uint32_t kSlots = 8, kSlotSize = 256, kMessages = 20000;
    alignas(64) static unsigned char ring_memory[kSlots * kSlotSize];
    std::memset(ring_memory, 0, sizeof(ring_memory));
    std::uint64_t consumed_word = 0;  // the sender's word the receiver RDMA-writes its consumed position into
    EagerRing ring;
    ring.init(ring_memory, kSlots, kSlotSize);
    EagerChannel channel;
    channel.activate(reinterpret_cast<std::uintptr_t>(ring_memory), 1, kSlots, kSlotSize, &consumed_word);

    // Message i: length from 0 to the largest payload, every byte a function of (i, position).
    auto length_of = [](std::uint32_t i) { return (i * 37u) % (eager_max_payload(kSlotSize) + 1); };
    auto byte_of = [](std::uint32_t i, std::uint32_t k) { return static_cast<unsigned char>(i * 131u + k * 7u + 1); };

    std::atomic<bool> reader_gone{false};  // a reader that found bad data stops: the writer must not wait for it
    std::thread writer([&] {
        std::vector<unsigned char> wire(kSlotSize);
        for (std::uint32_t i = 0; i < kMessages; ++i) {
            const std::uint32_t length = length_of(i);
            while (!channel.can_send(length))
                if (reader_gone.load())
                    return;
                else
                    std::this_thread::yield();
            for (std::uint32_t k = 0; k < length; ++k) wire[k] = byte_of(i, k);
            auto *footer = reinterpret_cast<EagerFooter *>(wire.data() + eager_padded(length));
            const std::uint64_t remote = channel.claim(length, static_cast<std::uint8_t>(i), 0, footer);
            auto *dst = reinterpret_cast<unsigned char *>(remote);
            const std::uint32_t size = eager_wire_size(length);
            std::memcpy(dst, wire.data(), size - 8);
            std::uint64_t seq;
            std::memcpy(&seq, wire.data() + size - 8, 8);
            __atomic_store_n(reinterpret_cast<std::uint64_t *>(dst + size - 8), seq, __ATOMIC_RELEASE);
        }
    });
    std::uint32_t received = 0, bad = 0;
    std::thread reader([&] {
        EagerRing::Message m{};
        while (received < kMessages) {
            if (!ring.peek(m)) {
                std::this_thread::yield();
                continue;
            }
            const std::uint32_t i = received;
            if (!m.well_formed || m.length != length_of(i) || m.tag != static_cast<std::uint8_t>(i)) {
                ++bad;
                break;
            }
            for (std::uint32_t k = 0; k < m.length; ++k)
                if (m.data[k] != byte_of(i, k)) {
                    ++bad;
                    break;
                }
            ring.release(m);
            ++received;
            if (ring.report_due()) {  // the credit report: an RDMA WRITE of the consumed position
                __atomic_store_n(&consumed_word, ring.consumed(), __ATOMIC_RELEASE);
                ring.reported(ring.consumed());
            }
        }
        reader_gone.store(true);
    });
    writer.join();
    reader.join();
    EXPECT_EQ(bad, 0u);
    EXPECT_EQ(received, kMessages);
    EXPECT_FALSE(ring.broken());
}

}  // namespace

// ---- a port's health and a rail given up -------------------------------------------------------------------------

// Every progressing thread acts on the port's events (PORT_ERR, PORT_ACTIVE, a re-query): of two threads that see
// the same change, exactly one is told it changed, and the counts agree with what the threads were told.
TEST(Concurrency, PortHealthEventsFromEveryProgressingThread) {
    PortHealth health(1000);
    constexpr int kThreads = 4, kRounds = 4000;
    std::atomic<std::uint64_t> told_down{0}, told_up{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < kRounds; ++i) {
                const std::uint64_t now = std::uint64_t(i) * 10 + t;
                if ((i + t) % 2 == 0) {
                    if (health.on_down(now)) told_down.fetch_add(1);
                } else {
                    std::uint64_t since = 0;
                    if (health.on_up(now, &since)) told_up.fetch_add(1);
                }
                (void)health.grace_expired(now);
                (void)health.down_for_us(now);
            }
        });
    for (auto &t : threads) t.join();
    EXPECT_EQ(health.downs(), told_down.load());
    EXPECT_EQ(health.ups(), told_up.load());
    EXPECT_GT(told_down.load(), 0u);
    EXPECT_EQ(health.downs() - health.ups(), health.down() ? 1u : 0u);
}

// A rail given up while senders post under the module's lock, progress ticks and completes, the service thread
// serves datagrams and timers, and another thread reports the port down and up: every message completes at most
// once (successfully, or with the rail's status), a send after the loss is refused, and the manager then has
// nothing left to do.
TEST(Concurrency, ARailAbandonedWhileSendersProgressAndTheServiceThreadRun) {
    CmConfig base;
    base.connect_timeout_us = 3600ull * 1000000;
    Net net(2, 2, base);
    constexpr int kMessages = 400;
    const std::vector<std::uint32_t> remote = {2, 3};
    for (std::uint32_t r : remote) net[0].peer(r);
    const std::vector<SendQueue *> queues = queues_of(net[0], remote);
    std::vector<std::unique_ptr<CountedMessage>> messages;
    for (int i = 0; i < kMessages; ++i) messages.push_back(std::make_unique<CountedMessage>());
    std::atomic<int> refused{0};
    std::atomic<bool> stop{false};
    {
        Service service(net);
        std::thread sender([&] {
            for (int i = 0; i < kMessages; ++i) {
                CountedMessage &m = *messages[i];
                std::lock_guard<std::recursive_mutex> g(net[0].queues_lock);
                Peer &peer = net[0].peer(remote[i % remote.size()]);
                peer.prepare_srq(m.op, &m.payload, sizeof(m.payload), 0, make_imm(0x41));
                m.op.on_complete = counted_done;
                if (peer.queue->post_or_queue(m.op) != 0) refused.fetch_add(1);
            }
        });
        std::thread progress([&] {
            while (!stop.load()) {
                for (auto &p : net.procs)
                    if (p->cm().busy()) p->cm().tick();
                complete_posted(net[0], queues);
                std::this_thread::yield();
            }
        });
        std::thread port_events([&] {
            for (int i = 0; i < 50; ++i) {
                net[0].cm().hold();
                net[0].cm().resume();
            }
        });
        EXPECT_TRUE(wait_for([&] { return messages[kMessages / 4]->completions.load() != 0; }));
        net[0].cm().abandon(IBV_WC_WR_FLUSH_ERR);
        sender.join();
        port_events.join();
        EXPECT_TRUE(wait_for([&] { return !net[0].cm().busy(); }));
        stop.store(true);
        progress.join();
        service.stop();
    }
    int completed = 0;
    for (const auto &m : messages) {
        EXPECT_LE(m->completions.load(), 1);
        completed += m->completions.load();
        EXPECT_LE(m->failures.load(), m->completions.load());
    }
    EXPECT_EQ(completed + refused.load(), kMessages);
    EXPECT_TRUE(net[0].cm().abandoned());
    EXPECT_FALSE(net[0].cm().busy());
    net[0].cm().begin_finalize();
    net[0].cm().tick();
    EXPECT_TRUE(net[0].cm().finished());
}
