// SPDX-License-Identifier: BSD-3-Clause
// The peers one module (rail) reaches, by who they are: every endpoint it made, owned until finalize (after
// del_procs, work still queued or in flight toward a peer's node names its endpoint until the queue drains), the
// live ones of this job by rank, and the live ones of other jobs (spawn, connect/accept) by (job, rank), with how
// many of each job are live (the last one leaving retires that job's connections). O(peers added).
//
// Threads: looked up and changed from any thread, also without the data-path lock (add_procs runs without it:
// ob1 calls it under its own lock, which a thread holding ours may be waiting for). Every call takes the
// directory's mutex, a leaf: held only inside these calls, never while calling out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace xrc {

template <class Endpoint>
class PeerDirectory {
public:
    // The live endpoint of `rank` of this job, or of another job's `jobid`, or null.
    Endpoint *find(std::uint32_t rank) const noexcept { return find_in(ranks_, rank); }
    Endpoint *find_other(std::uint32_t jobid, std::uint32_t rank) const noexcept {
        return find_in(others_, key_of(jobid, rank));
    }

    // Owns `endpoint` from now on, whatever fails after (it is freed by clear()); returns it.
    Endpoint *own(std::unique_ptr<Endpoint> endpoint) {
        const std::lock_guard<std::mutex> guard(mutex_);
        return made_.emplace_back(std::move(endpoint)).get();
    }
    // Listed live: found by rank, or by (job, rank) and counted with its job. Out of memory, they throw.
    void add(std::uint32_t rank, Endpoint *endpoint) {
        const std::lock_guard<std::mutex> guard(mutex_);
        ranks_.emplace(rank, endpoint);
    }
    void add_other(std::uint32_t jobid, std::uint32_t rank, Endpoint *endpoint) {
        const std::lock_guard<std::mutex> guard(mutex_);
        others_.emplace(key_of(jobid, rank), endpoint);
        ++jobs_[jobid];
    }

    // No longer live (still owned). False when `endpoint` was not the one listed: it left already, and a caller may
    // hand the same endpoint over more than once (ob1's BML keeps it in several arrays).
    bool remove(std::uint32_t rank, const Endpoint *endpoint) noexcept {
        const std::lock_guard<std::mutex> guard(mutex_);
        auto it = ranks_.find(rank);
        if (it == ranks_.end() || it->second != endpoint) return false;
        ranks_.erase(it);
        return true;
    }
    enum class Left : std::uint8_t { not_listed, one, last_of_job };
    Left remove_other(std::uint32_t jobid, std::uint32_t rank, const Endpoint *endpoint) noexcept {
        const std::lock_guard<std::mutex> guard(mutex_);
        auto it = others_.find(key_of(jobid, rank));
        if (it == others_.end() || it->second != endpoint) return Left::not_listed;
        others_.erase(it);
        auto count = jobs_.find(jobid);
        if (count == jobs_.end() || --count->second != 0) return Left::one;
        jobs_.erase(count);
        return Left::last_of_job;
    }

    // Copies, for paths that act on each one (errors, a rail's loss): every endpoint made, or the live ones of this
    // job. Out of memory, they throw.
    std::vector<Endpoint *> made() const {
        const std::lock_guard<std::mutex> guard(mutex_);
        std::vector<Endpoint *> all;
        all.reserve(made_.size());
        for (const auto &endpoint : made_) all.push_back(endpoint.get());
        return all;
    }
    std::vector<Endpoint *> live() const {
        const std::lock_guard<std::mutex> guard(mutex_);
        std::vector<Endpoint *> all;
        all.reserve(ranks_.size());
        for (const auto &[rank, endpoint] : ranks_) all.push_back(endpoint);
        return all;
    }

    // Finalize: nothing is found from now on, and every endpoint made is freed.
    void clear() noexcept {
        std::vector<std::unique_ptr<Endpoint>> made;
        {
            const std::lock_guard<std::mutex> guard(mutex_);
            ranks_.clear();
            others_.clear();
            jobs_.clear();
            made.swap(made_);
        }
    }

private:
    static constexpr std::uint64_t key_of(std::uint32_t jobid, std::uint32_t rank) noexcept {
        return (std::uint64_t{jobid} << 32) | rank;
    }
    template <class Map, class Key>
    Endpoint *find_in(const Map &map, Key key) const noexcept {
        const std::lock_guard<std::mutex> guard(mutex_);
        auto it = map.find(key);
        return it != map.end() ? it->second : nullptr;
    }

    mutable std::mutex mutex_;
    std::vector<std::unique_ptr<Endpoint>> made_;
    std::unordered_map<std::uint32_t, Endpoint *> ranks_;
    std::unordered_map<std::uint64_t, Endpoint *> others_;
    std::unordered_map<std::uint32_t, std::size_t> jobs_;  // live endpoints per other job
};

}  // namespace xrc
