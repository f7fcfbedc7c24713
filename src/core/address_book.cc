// SPDX-License-Identifier: BSD-3-Clause
#include "address_book.h"

namespace xrc {

void AddressBook::publish(ProcessAddress mine) {
    const std::lock_guard<std::mutex> guard(mutex_);
    mine_ = std::move(mine);
}

ProcessAddress AddressBook::mine() const {
    const std::lock_guard<std::mutex> guard(mutex_);
    return mine_;
}

const PortAddress *AddressBook::port_address(std::uint32_t rank, int module_index) noexcept {
    if (rank >= job_.size) return nullptr;
    return look_up(job_.jobid, rank, module_index);
}

const PortAddress *AddressBook::other_port_address(std::uint32_t jobid, std::uint32_t rank, int module_index) noexcept {
    return look_up(jobid, rank, module_index);
}

const PortAddress *AddressBook::paired(const std::optional<ProcessAddress> &peer, int module_index) const noexcept {
    if (!peer || module_index < 0) return nullptr;
    return paired_port(mine_, static_cast<std::size_t>(module_index), *peer);
}

void AddressBook::want(std::uint32_t jobid, std::uint32_t rank) {
    for (const Wanted &w : wanted_)
        if (w.jobid == jobid && w.rank == rank) return;
    wanted_.push_back({jobid, rank});
    addresses_wanted.store(true, std::memory_order_relaxed);
}

const PortAddress *AddressBook::look_up(std::uint32_t jobid, std::uint32_t rank, int module_index) noexcept {
    const Key key = key_of(jobid, rank);
    try {
        {
            const std::lock_guard<std::mutex> guard(mutex_);
            if (auto it = addresses_.find(key); it != addresses_.end()) return paired(it->second, module_index);
            if (hooks_.serving() && !modex_done.load(std::memory_order_acquire)) {
                want(jobid, rank);
                hooks_.wake();
                return nullptr;
            }
        }
        // Fetched without the mutex: the service thread keeps serving what it knows meanwhile.
        std::optional<ProcessAddress> decoded = hooks_.fetch(jobid, rank);
        const std::lock_guard<std::mutex> guard(mutex_);
        if (decoded && jobid == job_.jobid)
            for (PortAddress &port : decoded->ports)
                if (auto moved = moved_lids_.find(port_identity(port)); moved != moved_lids_.end())
                    port.lid = moved->second;
        auto it = addresses_.emplace(key, std::move(decoded)).first;  // another thread's fetch, if first, stays
        return paired(it->second, module_index);
    } catch (...) {
        return nullptr;
    }
}

void AddressBook::fetch_wanted_addresses() noexcept {
    std::vector<Wanted> fetch;
    {
        const std::lock_guard<std::mutex> guard(mutex_);
        fetch.swap(wanted_);
        addresses_wanted.store(false, std::memory_order_relaxed);
    }
    for (const Wanted &w : fetch) (void)look_up(w.jobid, w.rank, -1);
}

void AddressBook::move_port(std::uint64_t port, std::uint16_t old_lid, std::uint16_t new_lid) noexcept {
    const std::lock_guard<std::mutex> guard(mutex_);
    try {
        moved_lids_[port] = new_lid;
    } catch (...) {  // out of memory: addresses fetched later keep the published LID (their connections time out)
    }
    auto move = [&](ProcessAddress &address) {
        for (PortAddress &p : address.ports)
            if (port_identity(p) == port && p.lid == old_lid) p.lid = new_lid;
    };
    move(mine_);
    for (auto &[key, address] : addresses_)
        if (address && static_cast<std::uint32_t>(key >> 32) == job_.jobid) move(*address);
}

}  // namespace xrc
