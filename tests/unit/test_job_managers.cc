// SPDX-License-Identifier: BSD-3-Clause
// JobManagers: datagrams go to the manager of the sender's job; a job never met makes nothing; two jobs' managers
// keep their own TGT QPs; retiring one leaves the other working; finalize tells other jobs' senders at once.
#include "src/core/cm_message.h"
#include "src/core/job_managers.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace xrc {
namespace {

constexpr std::uint32_t kMyJob = 1, kJobA = 7, kJobB = 9;
constexpr std::uint32_t kMyRank = 3;
constexpr std::uint64_t kMyToken = 0x1234;

// A host whose QPs are plain records: counts what it was asked to make, answers for one job's ranks.
class FakeHost : public CmHost {
public:
    explicit FakeHost(std::uint32_t job) : job_(job) {}
    ~FakeHost() override { EXPECT_EQ(live, 0) << "job " << job_ << ": QPs left at the host's end"; }
    std::map<std::uint32_t, PortAddress> ranks;
    int tgts_made = 0, live = 0;
    std::vector<CmBytes> sent;

    const PortAddress *address_of(std::uint32_t rank) noexcept override {
        auto it = ranks.find(rank);
        return it != ranks.end() ? &it->second : nullptr;
    }
    void send_datagram(const PortAddress &, const CmBytes &bytes) noexcept override { sent.push_back(bytes); }
    Result<ibv_qp *> create_ini() noexcept override { return make(); }
    Result<void> connect_ini(ibv_qp *, const PortAddress &, std::uint32_t) noexcept override { return {}; }
    Result<ibv_qp *> create_tgt(const PortAddress &, std::uint32_t) noexcept override {
        ++tgts_made;
        return make();
    }
    Result<ibv_qp *> open_tgt(std::uint32_t, std::uint32_t) noexcept override { return make(); }
    void destroy_qp(ibv_qp *qp) noexcept override {
        delete qp;
        --live;
    }
    void address_moved(std::uint64_t, std::uint16_t, std::uint16_t) noexcept override {}
    Result<bool> migrate_path(ibv_qp *, std::uint16_t, std::uint16_t) noexcept override { return false; }
    bool reserve_completions(std::size_t) noexcept override { return true; }
    std::uint64_t now_us() noexcept override { return now += 10; }
    void link_failed(const NodeLink &, const std::string &) noexcept override {}
    void note(const std::string &) noexcept override {}

private:
    ibv_qp *make() {
        auto *qp = new ibv_qp{};
        qp->qp_num = next_qpn_++;
        ++live;
        return qp;
    }
    std::uint32_t job_;
    std::uint32_t next_qpn_ = 100;
    std::uint64_t now = 0;
};

PortAddress address(std::uint16_t lid, std::uint32_t cm_qpn) {
    PortAddress a;
    a.lid = lid;
    a.cm_qpn = cm_qpn;
    a.token = 0x99;
    a.node_id = 2;
    a.gid[15] = static_cast<std::uint8_t>(lid);  // its own port
    a.srqs.push_back({1024, 55});
    return a;
}

CmConfig config() {
    CmConfig c;
    c.my_rank = kMyRank;
    c.jobid = kMyJob;
    c.my_token = kMyToken;
    c.reciprocate = false;  // only what the datagrams make
    return c;
}

// A CONNECT to this process from rank `rank` of `job`, which sent it from `from`.
CmBytes connect_from(std::uint32_t job, std::uint32_t rank, std::uint32_t ini_qpn) {
    CmMessage m;
    m.type = CmType::Connect;
    m.jobid = job;
    m.src_rank = rank;
    m.dst_rank = kMyRank;
    m.token = kMyToken;
    m.generation = 1;
    m.ini_qpn = ini_qpn;
    return encode_cm(m);
}

struct JobManagersTest : ::testing::Test {
    FakeHost home_host{kMyJob};
    ConnectionManager home{home_host, config()};
    std::unique_ptr<JobManagers> jobs = std::make_unique<JobManagers>(home);
    FakeHost *a = nullptr, *b = nullptr;
    ConnectionManager *meet(std::uint32_t job, FakeHost **out) {
        auto host = std::make_unique<FakeHost>(job);
        host->ranks[0] = address(static_cast<std::uint16_t>(job), 1000 + job);  // rank 0 of that job
        *out = host.get();
        return &jobs->meet(job, std::move(host), config());
    }
    ~JobManagersTest() override { jobs.reset(); }  // before home: the managers hold handles there
};

TEST_F(JobManagersTest, DatagramOfAJobNeverMetMakesNothing) {
    meet(kJobA, &a);
    const CmBytes bytes = connect_from(kJobB, 0, 500);
    EXPECT_FALSE(jobs->on_datagram(bytes, kJobB, 1000 + kJobB));
    EXPECT_EQ(jobs->size(), 1u);
    EXPECT_EQ(jobs->find(kJobB), nullptr);
    EXPECT_EQ(a->tgts_made, 0);
    EXPECT_EQ(home_host.tgts_made, 0);
    EXPECT_EQ(home.counters().cm_rejected, 1u);
    EXPECT_TRUE(a->sent.empty());
    EXPECT_TRUE(home_host.sent.empty());
}

TEST_F(JobManagersTest, TwoJobsManagersAreIndependent) {
    ConnectionManager *ma = meet(kJobA, &a);
    ConnectionManager *mb = meet(kJobB, &b);
    ASSERT_NE(ma, mb);
    EXPECT_EQ(jobs->find(kJobA), ma);
    EXPECT_EQ(jobs->find(kJobB), mb);
    // Rank 0 of job A connects: job A's manager makes the TGT QP, answered from there; job B's and ours see nothing.
    EXPECT_TRUE(jobs->on_datagram(connect_from(kJobA, 0, 500), kJobA, 1000 + kJobA));
    EXPECT_EQ(a->tgts_made, 1);
    EXPECT_EQ(b->tgts_made, 0);
    EXPECT_EQ(home_host.tgts_made, 0);
    EXPECT_EQ(ma->owned_tgts(), 1u);
    EXPECT_EQ(mb->owned_tgts(), 0u);
    ASSERT_EQ(a->sent.size(), 1u);
    const auto accept = decode_cm(a->sent[0]);
    ASSERT_TRUE(accept);
    EXPECT_EQ(accept->type, CmType::Accept);
    EXPECT_EQ(accept->jobid, kMyJob);  // what we send names our job
    // The same rank number in job B, from job A's source: job B's manager checks against job B's rank 0 and drops it.
    EXPECT_TRUE(jobs->on_datagram(connect_from(kJobB, 0, 501), kJobA, 1000 + kJobA));
    EXPECT_EQ(b->tgts_made, 0);
    // From job B's own rank 0: made there.
    EXPECT_TRUE(jobs->on_datagram(connect_from(kJobB, 0, 502), kJobB, 1000 + kJobB));
    EXPECT_EQ(b->tgts_made, 1);
    EXPECT_EQ(ma->owned_tgts(), 1u);
    // A datagram of our own job goes to our manager (no rank 0 in it here: dropped there, nothing made).
    EXPECT_TRUE(jobs->on_datagram(connect_from(kMyJob, 0, 503), kJobA, 1000 + kJobA));
    EXPECT_EQ(home_host.tgts_made, 0);
}

TEST_F(JobManagersTest, RetiringOneJobLeavesTheOther) {
    ConnectionManager *ma = meet(kJobA, &a);
    meet(kJobB, &b);
    EXPECT_TRUE(jobs->on_datagram(connect_from(kJobA, 0, 500), kJobA, 1000 + kJobA));
    jobs->retire(kJobB);
    EXPECT_EQ(jobs->find(kJobB), nullptr);
    EXPECT_TRUE(jobs->busy());
    jobs->tick(1);  // job B holds nothing: released at once
    EXPECT_EQ(jobs->size(), 1u);
    EXPECT_EQ(jobs->find(kJobA), ma);
    EXPECT_EQ(ma->owned_tgts(), 1u);
    // Job B's datagrams make nothing any more; job A's manager still answers.
    EXPECT_FALSE(jobs->on_datagram(connect_from(kJobB, 0, 502), kJobB, 1000 + kJobB));
    EXPECT_EQ(home.counters().cm_rejected, 1u);
    EXPECT_TRUE(jobs->on_datagram(connect_from(kJobA, 0, 500), kJobA, 1000 + kJobA));  // a duplicate: same answer
    EXPECT_EQ(a->tgts_made, 1);
    EXPECT_EQ(a->sent.size(), 2u);
}

TEST_F(JobManagersTest, RetiredJobKeepsItsTgtUntilItsSenderClosesIt) {
    ConnectionManager *ma = meet(kJobA, &a);
    EXPECT_TRUE(jobs->on_datagram(connect_from(kJobA, 0, 500), kJobA, 1000 + kJobA));
    jobs->retire(kJobA);
    jobs->tick(1);
    EXPECT_EQ(jobs->size(), 1u);  // its sender has not closed the TGT QP made for it
    EXPECT_EQ(ma->owned_tgts(), 1u);
    const auto accept = decode_cm(a->sent.at(0));
    ASSERT_TRUE(accept);
    CmMessage close;
    close.type = CmType::Close;
    close.jobid = kJobA;
    close.src_rank = 0;
    close.dst_rank = kMyRank;
    close.token = kMyToken;
    close.generation = 1;
    close.ini_qpn = 500;
    close.tgt_qpn = accept->tgt_qpn;
    EXPECT_TRUE(jobs->on_datagram(encode_cm(close), kJobA, 1000 + kJobA));  // still takes its job's datagrams
    jobs->tick(2);
    EXPECT_EQ(jobs->size(), 0u);
}

// Finalize tells the senders of other jobs at once: a spawned child's parents go on, no finalize of theirs would
// make them close. Each is told LEAVING by the manager of its own job (the datagram names our job), an answer
// releases its TGT QP there, and our own job's senders are not told (they close at their own finalize).
TEST_F(JobManagersTest, FinalizeTellsOtherJobsSendersAtOnce) {
    ConnectionManager *ma = meet(kJobA, &a);
    ConnectionManager *mb = meet(kJobB, &b);
    EXPECT_TRUE(jobs->on_datagram(connect_from(kJobA, 0, 500), kJobA, 1000 + kJobA));
    const auto accept = decode_cm(a->sent.at(0));
    ASSERT_TRUE(accept);
    home.begin_finalize();
    ma->begin_finalize();
    mb->begin_finalize();
    EXPECT_TRUE(ma->own_work_finished());
    EXPECT_FALSE(ma->finished());
    const std::size_t home_sent = home_host.sent.size(), a_sent = a->sent.size(), b_sent = b->sent.size();
    const std::string told = jobs->leave_initiators();
    EXPECT_EQ(told,
              "job " + std::to_string(kJobA) + " rank 0's INI QP 500 (TGT QP " + std::to_string(accept->tgt_qpn) + ")");
    EXPECT_EQ(home_host.sent.size(), home_sent);
    EXPECT_EQ(b->sent.size(), b_sent);  // job B holds no TGT QP of ours
    ASSERT_EQ(a->sent.size(), a_sent + 1);
    const auto leaving = decode_cm(a->sent.back());
    ASSERT_TRUE(leaving);
    EXPECT_EQ(leaving->type, CmType::Leaving);
    EXPECT_EQ(leaving->jobid, kMyJob);
    EXPECT_EQ(leaving->dst_rank, 0u);
    EXPECT_EQ(leaving->ini_qpn, 500u);
    EXPECT_EQ(leaving->tgt_qpn, accept->tgt_qpn);
    // Its answer, right away as from a sender that progresses: the TGT QP goes, nothing of ours waits any more.
    CmMessage ack;
    ack.type = CmType::LeavingAck;
    ack.jobid = kJobA;
    ack.src_rank = 0;
    ack.dst_rank = kMyRank;
    ack.token = kMyToken;
    ack.generation = 1;
    ack.ini_qpn = 500;
    ack.tgt_qpn = accept->tgt_qpn;
    EXPECT_TRUE(jobs->on_datagram(encode_cm(ack), kJobA, 1000 + kJobA));
    EXPECT_EQ(ma->owned_tgts(), 0u);
    EXPECT_TRUE(ma->finished());
    EXPECT_TRUE(mb->finished());
    EXPECT_EQ(jobs->leave_initiators(), "");  // nobody left to tell
    EXPECT_EQ(a->sent.size(), a_sent + 1);
}

}  // namespace
}  // namespace xrc
