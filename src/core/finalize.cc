// SPDX-License-Identifier: BSD-3-Clause
#include "finalize.h"

#include <algorithm>
#include <utility>

namespace xrc {

Finalize::Finalize(FinalizePort &port, const FinalizeConfig &config, std::uint64_t now_us) noexcept
    : port_(port), config_(config), started_us_(now_us), phase_started_us_(now_us) {
    config_.peer_wait_us = std::min(config_.peer_wait_us, config_.wait_us);
}

void Finalize::note(int verbosity, std::string text) noexcept {
    try {
        notes_.push_back({verbosity, std::move(text)});
    } catch (...) {  // out of memory: a log line lost, finalize goes on
    }
}

std::vector<FinalizeNote> Finalize::take_notes() noexcept {
    std::vector<FinalizeNote> notes;
    notes.swap(notes_);
    return notes;
}

void Finalize::step(std::uint64_t now_us, bool failed) noexcept {
    switch (phase_) {
        case Phase::own_work:
            if (port_.own_work_finished() || failed || port_.abandoned()) {
                own_work_done_ = true;
                end_own_work(now_us, failed);
            } else if (now_us - started_us_ >= config_.wait_us) {
                note(1, "connections still open after " + std::to_string(config_.wait_us / 1000000) +
                            " s at finalize (btl_xrc_finalize_wait)");
                end_own_work(now_us, failed);
            }
            return;
        case Phase::peer_wait:
            if (port_.finished() || failed || port_.abandoned())
                phase_ = Phase::done;
            else if (now_us - phase_started_us_ >= config_.peer_wait_us)
                end_peer_wait(now_us);
            return;
        case Phase::answer_wait:
            if (port_.finished() || failed || now_us - phase_started_us_ >= config_.answer_wait_us)
                end_answer_wait(now_us);
            return;
        case Phase::done:
            return;
    }
}

void Finalize::end_own_work(std::uint64_t now_us, bool failed) noexcept {
    // A failed process waits for nobody (those it cannot reach will not answer; it exits with an error), and a rail
    // given up has nobody to tell or wait for.
    if (failed || port_.abandoned()) {
        phase_ = Phase::done;
        return;
    }
    try {
        // Other jobs' senders (a spawned child's parents, a job met through MPI_Comm_connect) go on past our
        // finalize and would not close before the peer wait ran out: told now, they answer as soon as they
        // progress, and what they posted toward us is retired by their fence as below.
        if (const std::string told = port_.leave_other_jobs(); !told.empty())
            note(5, "MPI_Finalize: told other jobs' senders that this process leaves: " + told);
        // Several rails: the senders this rail was lost toward (their traffic went over another rail) cannot close
        // through it what they had from us, nor answer LEAVING: their TGT QPs go now rather than after the wait.
        if (const std::string dropped = port_.drop_lost_initiators(); !dropped.empty())
            note(10, "the rail is lost toward their senders: dropping " + dropped);
    } catch (...) {  // out of memory for a line: what it said was done
    }
    phase_ = Phase::peer_wait;
    phase_started_us_ = now_us;
    // What is left is other nodes' senders closing the TGT QPs we made for them: one that is alive but has not
    // reached its own finalize would hold this process up to finalize_wait; bounded by the peer wait instead.
    if (port_.finished()) phase_ = Phase::done;
}

void Finalize::end_peer_wait(std::uint64_t now_us) noexcept {
    // Each is told, and retires what it posted toward this node with a fence toward our SRQ, which must still be
    // there: its answer is waited for, but not beyond the answer wait (a sender that does not progress, or is gone,
    // does not answer).
    told_ = port_.leave_initiators();
    phase_started_us_ = now_us;
    if (told_.empty()) {
        (void)port_.drop_initiators();
        phase_ = Phase::done;
        return;
    }
    phase_ = Phase::answer_wait;
}

void Finalize::end_answer_wait(std::uint64_t now_us) noexcept {
    const std::string silent = port_.drop_initiators();
    phase_ = Phase::done;
    try {
        const std::string answers =
            silent.empty() ? "every one answered (what it had posted before is retired)" : "no answer from " + silent;
        note(1, "leaving MPI_Finalize after waiting " + std::to_string(config_.peer_wait_us / 1000000) +
                    " s (btl_xrc_finalize_peer_wait) for senders to close the TGT QPs made for them: " + told_ +
                    "; each was told, signals every send from then on and closes without a fence; " + answers +
                    " after " + std::to_string((now_us - phase_started_us_) / 1000) +
                    " ms; the TGT QPs go with the last rank of this node holding them");
    } catch (...) {  // out of memory for the line
    }
}

}  // namespace xrc
