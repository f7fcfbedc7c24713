// SPDX-License-Identifier: BSD-3-Clause
// The order and the bounds of one port's MPI_Finalize, as a state machine the BTL steps: it calls progress once,
// then step(now); asks done(); and logs what take_notes() returns. No clock, thread or verbs call of its own, so its
// timing rules are unit-tested with a fake port and a fake clock (tests/unit/test_finalize.cc).
//
//   own work: every send drained and every connection closed (FinalizePort::own_work_finished), at most `wait_us`
//     from the start (then "connections still open"). Then, unless the process failed: other jobs' senders are told
//     this process leaves (they have no finalize of ours to reach), and the TGT QPs of the senders a lost rail no
//     longer reaches are dropped (they cannot close them through it).
//   peer wait: the senders of this job close the TGT QPs made for them (FinalizePort::finished), at most
//     `peer_wait_us`; then each is told LEAVING (leave_initiators).
//   answer wait: their LEAVING_ACK, at most `answer_wait_us` from when they were told; those that did not answer
//     have their TGT QPs dropped (drop_initiators), and the line says who was told and who answered.
//   done.
// A process that failed (`failed` in step(): a port down past its grace, work lost at finalize) waits for nothing
// more: the peers it cannot reach will not answer, and it exits with an error. A rail given up (abandon: DEVICE_FATAL,
// grace expired with other rails) has nothing to wait for: its queues failed over, and nobody can close or answer
// through it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xrc {

// What finalize asks of the port (the BTL's module: PortTransport, and its failover's lost peers).
class FinalizePort {
public:
    virtual ~FinalizePort() = default;
    // Every send drained (fences retired the unsignaled ones) and every connection closed, CLOSEs acknowledged.
    virtual bool own_work_finished() noexcept = 0;
    // own_work_finished(), and every TGT QP this process made was closed (or released) by its initiator.
    virtual bool finished() noexcept = 0;
    // The rail was given up for good: nothing is waited for through it.
    virtual bool abandoned() noexcept = 0;
    // Other jobs' senders are told LEAVING; returns who ("; "-separated), empty when none.
    virtual std::string leave_other_jobs() noexcept = 0;
    // The TGT QPs of the senders this rail was lost toward are dropped; returns them, empty when none.
    virtual std::string drop_lost_initiators() noexcept = 0;
    // This job's senders that did not close are told LEAVING; returns them, empty when none.
    virtual std::string leave_initiators() noexcept = 0;
    // The TGT QPs of those that did not answer are dropped; returns them, empty when every one answered.
    virtual std::string drop_initiators() noexcept = 0;
};

struct FinalizeConfig {
    std::uint64_t wait_us = 300000000;       // btl_xrc_finalize_wait: for this process's own work
    std::uint64_t peer_wait_us = 5000000;    // btl_xrc_finalize_peer_wait (at most wait_us): for senders to close
    std::uint64_t answer_wait_us = 2500000;  // CmConfig::leaving_wait_us: for their answers to LEAVING
};

// A line for the log: the BTL prints it after "btl:xrc: HOST: DEVICE:PORT: " at this verbosity.
struct FinalizeNote {
    int verbosity;
    std::string text;
};

class Finalize {
public:
    enum class Phase : std::uint8_t { own_work, peer_wait, answer_wait, done };

    // Finalize of `port` begins at `now_us` (the port's begin_finalize() was called).
    Finalize(FinalizePort &port, const FinalizeConfig &config, std::uint64_t now_us) noexcept;
    Finalize(const Finalize &) = delete;
    Finalize &operator=(const Finalize &) = delete;

    // After one progress call, at `now_us`; `failed`: the process has failed (nothing is waited for any more).
    void step(std::uint64_t now_us, bool failed) noexcept;
    bool done() const noexcept { return phase_ == Phase::done; }
    Phase phase() const noexcept { return phase_; }
    // The lines due since the last call, in order.
    std::vector<FinalizeNote> take_notes() noexcept;
    // Whether the own work ended within its bound (false: connections were still open when it ran out).
    bool own_work_done() const noexcept { return own_work_done_; }

private:
    void note(int verbosity, std::string text) noexcept;
    void end_own_work(std::uint64_t now_us, bool failed) noexcept;
    void end_peer_wait(std::uint64_t now_us) noexcept;
    void end_answer_wait(std::uint64_t now_us) noexcept;

    FinalizePort &port_;
    FinalizeConfig config_;
    Phase phase_ = Phase::own_work;
    std::uint64_t started_us_;
    std::uint64_t phase_started_us_;
    bool own_work_done_ = false;
    std::string told_;  // the senders told LEAVING after the peer wait
    std::vector<FinalizeNote> notes_;
};

}  // namespace xrc
