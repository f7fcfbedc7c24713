// SPDX-License-Identifier: BSD-3-Clause
// Finalize's order and bounds (src/core/finalize.h) with a fake port and a fake clock: the own work's bound, the
// peer wait, the wait for answers to LEAVING, a failed process ending it at once, an abandoned rail not waited for.
#include "src/core/finalize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace xrc;

namespace {

struct FakePort : FinalizePort {
    bool own = false, fin = false, gone = false;
    std::string others, lost, initiators = "rank 0's INI QP 9 (TGT QP 7)", silent;
    std::vector<std::string> calls;
    bool own_work_finished() noexcept override { return own; }
    bool finished() noexcept override { return own && fin; }
    bool abandoned() noexcept override { return gone; }
    std::string leave_other_jobs() noexcept override {
        calls.push_back("leave_other_jobs");
        return others;
    }
    std::string drop_lost_initiators() noexcept override {
        calls.push_back("drop_lost_initiators");
        return lost;
    }
    std::string leave_initiators() noexcept override {
        calls.push_back("leave_initiators");
        return initiators;
    }
    std::string drop_initiators() noexcept override {
        calls.push_back("drop_initiators");
        return silent;
    }
};

constexpr std::uint64_t kS = 1000000;

FinalizeConfig config() {
    FinalizeConfig c;
    c.wait_us = 300 * kS;
    c.peer_wait_us = 5 * kS;
    c.answer_wait_us = 2500000;
    return c;
}

// Steps every millisecond from `t` until done or `until`; returns the time it was done (or `until`).
std::uint64_t run(Finalize &f, std::uint64_t t, std::uint64_t until, bool failed = false) {
    for (; t < until && !f.done(); t += 1000) f.step(t, failed);
    return t;
}

std::string all_notes(Finalize &f) {
    std::string s;
    for (const FinalizeNote &n : f.take_notes()) s += std::to_string(n.verbosity) + ":" + n.text + "\n";
    return s;
}

}  // namespace

// Everything closes by itself: no LEAVING, nothing logged at verbosity 1.
TEST(Finalize, EndsAsSoonAsEveryoneClosed) {
    FakePort port;
    Finalize f(port, config(), 0);
    f.step(1000, false);
    EXPECT_EQ(f.phase(), Finalize::Phase::own_work);
    port.own = true;
    port.fin = true;
    f.step(2000, false);
    EXPECT_TRUE(f.done());
    EXPECT_TRUE(f.own_work_done());
    EXPECT_EQ(port.calls, (std::vector<std::string>{"leave_other_jobs", "drop_lost_initiators"}));
    EXPECT_EQ(all_notes(f).find("1:"), std::string::npos);
}

// Own work drained; a sender of this job does not close: told after the peer wait, dropped after the answer wait.
TEST(Finalize, PeerWaitThenLeavingThenTheAnswerWait) {
    FakePort port;
    port.own = true;
    port.silent = port.initiators;
    Finalize f(port, config(), 0);
    f.step(0, false);
    EXPECT_EQ(f.phase(), Finalize::Phase::peer_wait);
    std::uint64_t t = run(f, 1000, 5 * kS - 1000);
    EXPECT_EQ(f.phase(), Finalize::Phase::peer_wait) << "LEAVING before the peer wait ran out";
    t = run(f, t, 5 * kS + 2000);
    EXPECT_EQ(f.phase(), Finalize::Phase::answer_wait);
    EXPECT_EQ(port.calls.back(), "leave_initiators");
    t = run(f, t, 7 * kS);
    EXPECT_EQ(f.phase(), Finalize::Phase::answer_wait) << "stopped waiting for answers early";
    const std::uint64_t end = run(f, t, 10 * kS);
    EXPECT_TRUE(f.done());
    EXPECT_NEAR(double(end), 7.5 * kS, 3000.0);
    EXPECT_EQ(port.calls.back(), "drop_initiators");
    const std::string notes = all_notes(f);
    EXPECT_NE(notes.find("1:leaving MPI_Finalize after waiting 5 s (btl_xrc_finalize_peer_wait) for senders to close "
                         "the TGT QPs made for them: rank 0's INI QP 9 (TGT QP 7)"),
              std::string::npos)
        << notes;
    EXPECT_NE(notes.find("no answer from rank 0's INI QP 9 (TGT QP 7) after 2500 ms"), std::string::npos) << notes;
}

// The sender answers: finalize ends at once, and the line says every one answered.
TEST(Finalize, AnAnswerEndsTheWaitAtOnce) {
    FakePort port;
    port.own = true;
    Finalize f(port, config(), 0);
    run(f, 0, 5 * kS + 2000);
    ASSERT_EQ(f.phase(), Finalize::Phase::answer_wait);
    port.fin = true;
    f.step(5 * kS + 3000, false);  // 3 ms after the step that told them (at 5 s)
    EXPECT_TRUE(f.done());
    EXPECT_NE(all_notes(f).find("every one answered (what it had posted before is retired) after 3 ms"),
              std::string::npos);
}

// The peer wait is never longer than the whole finalize wait; 0 tells at once.
TEST(Finalize, ThePeerWaitIsBoundedByTheFinalizeWait) {
    FakePort port;
    port.own = true;
    FinalizeConfig c = config();
    c.wait_us = 2 * kS;
    Finalize f(port, c, 0);
    run(f, 0, 2 * kS + 2000);
    EXPECT_EQ(f.phase(), Finalize::Phase::answer_wait);
    FakePort now;
    now.own = true;
    c.peer_wait_us = 0;
    Finalize g(now, c, 0);
    g.step(0, false);
    g.step(1, false);
    EXPECT_EQ(g.phase(), Finalize::Phase::answer_wait);
}

// Nobody to tell after the peer wait (e.g. only TGT QPs whose senders' rail was lost, dropped already): done.
TEST(Finalize, NobodyToTellEndsAfterThePeerWait) {
    FakePort port;
    port.own = true;
    port.initiators.clear();
    Finalize f(port, config(), 0);
    const std::uint64_t end = run(f, 0, 10 * kS);
    EXPECT_TRUE(f.done());
    EXPECT_NEAR(double(end), 5.0 * kS, 2000.0);
    EXPECT_EQ(all_notes(f), "");
}

// Own work that never finishes: bounded by the finalize wait, said at verbosity 1, then the peer wait as usual.
TEST(Finalize, OwnWorkIsBoundedByTheFinalizeWait) {
    FakePort port;
    FinalizeConfig c = config();
    c.wait_us = 20 * kS;
    Finalize f(port, c, 0);
    std::uint64_t t = run(f, 0, 20 * kS - 1000);
    EXPECT_EQ(f.phase(), Finalize::Phase::own_work);
    t = run(f, t, 20 * kS + 2000);
    EXPECT_EQ(f.phase(), Finalize::Phase::peer_wait);
    EXPECT_FALSE(f.own_work_done());
    EXPECT_NE(all_notes(f).find("1:connections still open after 20 s at finalize"), std::string::npos);
}

// A failed process (a port down past its grace, work lost at finalize) ends at once, whatever phase it is in, and
// tells nobody: those it cannot reach would not answer.
TEST(Finalize, AFailureEndsItAtOnce) {
    FakePort port;
    Finalize f(port, config(), 0);
    f.step(1000, true);
    EXPECT_TRUE(f.done());
    EXPECT_TRUE(port.calls.empty());
    FakePort later;
    later.own = true;
    Finalize g(later, config(), 0);
    run(g, 0, 2 * kS);
    ASSERT_EQ(g.phase(), Finalize::Phase::peer_wait);
    g.step(2 * kS, true);
    EXPECT_TRUE(g.done());
    EXPECT_EQ(std::count(later.calls.begin(), later.calls.end(), "leave_initiators"), 0);
}

// A rail given up (DEVICE_FATAL, the grace expired with other rails): nothing to wait for, nobody to tell, even
// while its own work looks unfinished (a connection that could never be made) or its TGT QPs are still held.
TEST(Finalize, AnAbandonedRailIsNotWaitedFor) {
    FakePort port;
    port.gone = true;
    Finalize f(port, config(), 0);
    f.step(1000, false);
    EXPECT_TRUE(f.done());
    EXPECT_TRUE(port.calls.empty());
    FakePort midway;
    midway.own = true;
    Finalize g(midway, config(), 0);
    run(g, 0, kS);
    ASSERT_EQ(g.phase(), Finalize::Phase::peer_wait);
    midway.gone = true;
    g.step(kS + 1000, false);
    EXPECT_TRUE(g.done());
    EXPECT_EQ(std::count(midway.calls.begin(), midway.calls.end(), "leave_initiators"), 0);
}

// What the BTL logs for other jobs and lost rails, at their verbosity.
TEST(Finalize, OtherJobsAndLostSendersAreSaid) {
    FakePort port;
    port.own = true;
    port.fin = true;
    port.others = "job 5 rank 1's INI QP 3 (TGT QP 4)";
    port.lost = "rank 2's INI QP 5 (TGT QP 6)";
    Finalize f(port, config(), 0);
    f.step(0, false);
    EXPECT_TRUE(f.done());
    const std::string notes = all_notes(f);
    EXPECT_NE(notes.find("5:MPI_Finalize: told other jobs' senders that this process leaves: job 5"), std::string::npos)
        << notes;
    EXPECT_NE(notes.find("10:the rail is lost toward their senders: dropping rank 2's"), std::string::npos) << notes;
}
