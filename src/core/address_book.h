// SPDX-License-Identifier: BSD-3-Clause
// The peers' modex addresses as this process knows them: what it published itself (one port per module, in module
// order), each peer's decoded blob, fetched when first needed and kept by (job, rank) (O(peers contacted)), the
// ports whose LID moved since they published it, and the peers the service thread needed before any other thread
// had fetched them. Fetching is the BTL's (a PMIx call), as is knowing whether the calling thread is the service
// thread: both come in as hooks.
//
// Why the service thread never fetches: it looks up the senders of connection requests, and a datagram can come
// from a peer that left the modex fence before this process did. A fetch for that peer's blob then goes to the
// launcher and blocks (on Open MPI 5.0.7 under load, once for the whole job) while the service thread holds the
// connection manager's mutex and this book's, which the main thread's add_procs waits for: the process would never
// leave MPI_Init. So the service thread reads only what was fetched; anything else it asks of progress (the datagram
// is dropped meanwhile, and its sender sends it again). Once this process has left the fence (modex_done), every
// rank's address is with its PMIx client and fetching it goes nowhere: the service thread may then fetch too.
#pragma once

#include "address.h"
#include "params.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace xrc {

class AddressBook {
public:
    struct Hooks {
        // The published address of rank `rank` of job `jobid`, decoded; nothing when it published none (it is not
        // reachable through xrc) or a malformed one (the hook says so). May block on the launcher.
        std::function<std::optional<ProcessAddress>(std::uint32_t jobid, std::uint32_t rank)> fetch;
        // The calling thread is the service thread, serving datagrams.
        std::function<bool()> serving;
        // Asks progress to call fetch_wanted_addresses soon.
        std::function<void()> wake;
    };

    // `job`: this job (its id, its size), read at each look-up; it outlives the book.
    AddressBook(const JobShape &job, Hooks hooks) : job_(job), hooks_(std::move(hooks)) {}

    // What this process published: one port per module, in module order.
    void publish(ProcessAddress mine);
    ProcessAddress mine() const;

    // The address of the port of `rank` (of this job) that my module `module_index` talks to (the one on the same
    // fabric: paired_port), fetching the peer's blob on first use; null if the peer published none (or a malformed
    // one) or has no port on that module's fabric, and for a negative `module_index` (a fetch only). On the service
    // thread before modex_done, only what was fetched already: null otherwise, and the peer is fetched by the next
    // progress call. The pointers given out stay valid as long as the book (move_port updates them in place).
    const PortAddress *port_address(std::uint32_t rank, int module_index) noexcept;
    // The same for rank `rank` of another job `jobid` (spawned, or connected to).
    const PortAddress *other_port_address(std::uint32_t jobid, std::uint32_t rank, int module_index) noexcept;

    // Progress (never the service thread): fetches what the service thread asked for.
    void fetch_wanted_addresses() noexcept;

    // The HCA port `port` (port_identity()) moved from LID `old_lid` to `new_lid`: every address of this job's that
    // names it, fetched so far or later, says `new_lid`.
    void move_port(std::uint64_t port, std::uint16_t old_lid, std::uint16_t new_lid) noexcept;

    // The service thread asked for addresses (fetch_wanted_addresses has something to do): a cheap test for progress.
    std::atomic<bool> addresses_wanted{false};
    // This process has left the modex fence (its first add_procs): see the top of this file.
    std::atomic<bool> modex_done{false};

private:
    using Key = std::uint64_t;  // (job << 32) | rank
    static constexpr Key key_of(std::uint32_t jobid, std::uint32_t rank) noexcept { return (Key{jobid} << 32) | rank; }
    const PortAddress *look_up(std::uint32_t jobid, std::uint32_t rank, int module_index) noexcept;
    const PortAddress *paired(const std::optional<ProcessAddress> &peer, int module_index) const noexcept;
    // Called with mutex_ held.
    void want(std::uint32_t jobid, std::uint32_t rank);

    const JobShape &job_;
    const Hooks hooks_;
    // Guards everything below: the service thread looks up the senders of connection requests. Never held across
    // a fetch.
    mutable std::mutex mutex_;
    ProcessAddress mine_;
    std::unordered_map<Key, std::optional<ProcessAddress>> addresses_;  // nullopt: none, or malformed
    // port_identity() -> the LID it has now, applied to every address of this job fetched later. O(ports moved).
    std::unordered_map<std::uint64_t, std::uint16_t> moved_lids_;
    struct Wanted {
        std::uint32_t jobid, rank;
    };
    std::vector<Wanted> wanted_;
};

}  // namespace xrc
