// SPDX-License-Identifier: BSD-3-Clause
// The peers' modex addresses: fetched once, paired by fabric, never fetched on the service thread before the fence,
// LIDs that moved applied to what was and will be fetched.
#include "src/core/address_book.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

namespace {

constexpr std::uint32_t kJob = 7;

xrc::PortAddress port(std::uint64_t prefix, std::uint64_t guid, std::uint16_t lid) {
    xrc::PortAddress p{};
    std::memcpy(p.gid, &prefix, 8);
    std::memcpy(p.gid + 8, &guid, 8);
    p.lid = lid;
    p.srqs.push_back({4096, 1});
    return p;
}

struct Book {
    xrc::JobShape job;
    std::map<std::pair<std::uint32_t, std::uint32_t>, int> fetched;  // (job, rank) -> fetches
    bool serving = false;
    int wakes = 0;
    xrc::AddressBook book{
        job,
        {.fetch = [this](std::uint32_t jobid, std::uint32_t rank) -> std::optional<xrc::ProcessAddress> {
             ++fetched[{jobid, rank}];
             if (rank == 3) return std::nullopt;  // published none
             xrc::ProcessAddress a;
             a.ports.push_back(port(0xaa, 100 + rank, static_cast<std::uint16_t>(rank + 1)));
             return a;
         },
         .serving = [this] { return serving; },
         .wake = [this] { ++wakes; }}};

    int times(std::uint32_t jobid, std::uint32_t rank) const {
        const auto it = fetched.find({jobid, rank});
        return it != fetched.end() ? it->second : 0;
    }

    Book() {
        job.jobid = kJob;
        job.size = 4;
        xrc::ProcessAddress mine;
        mine.ports.push_back(port(0xaa, 1, 1));
        book.publish(mine);
    }
};

}  // namespace

TEST(AddressBook, FetchesEachPeerOnceAndPairsItsPort) {
    Book b;
    const xrc::PortAddress *first = b.book.port_address(2, 0);
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(first->lid, 3);
    EXPECT_EQ(b.book.port_address(2, 0), first);
    EXPECT_EQ(b.times(kJob, 2), 1);
    EXPECT_EQ(b.book.port_address(2, 1), nullptr);  // no second port of mine to pair
}

TEST(AddressBook, APeerWithoutAddressIsAskedOnceAndBeyondTheJobNever) {
    Book b;
    EXPECT_EQ(b.book.port_address(3, 0), nullptr);
    EXPECT_EQ(b.book.port_address(3, 0), nullptr);
    EXPECT_EQ(b.times(kJob, 3), 1);
    EXPECT_EQ(b.book.port_address(4, 0), nullptr);
    EXPECT_EQ(b.times(kJob, 4), 0);
}

TEST(AddressBook, TheServiceThreadAsksProgressInsteadOfFetching) {
    Book b;
    b.serving = true;
    EXPECT_EQ(b.book.port_address(1, 0), nullptr);
    EXPECT_EQ(b.book.other_port_address(9, 0, 0), nullptr);
    EXPECT_EQ(b.book.port_address(1, 0), nullptr);  // asked once
    EXPECT_TRUE(b.fetched.empty());
    EXPECT_EQ(b.wakes, 3);
    EXPECT_TRUE(b.book.addresses_wanted.load());
    b.serving = false;
    b.book.fetch_wanted_addresses();
    EXPECT_FALSE(b.book.addresses_wanted.load());
    EXPECT_EQ(b.times(kJob, 1), 1);
    EXPECT_EQ(b.times(9, 0), 1);
    b.serving = true;  // what was fetched is read on the service thread too
    EXPECT_NE(b.book.port_address(1, 0), nullptr);
    EXPECT_NE(b.book.other_port_address(9, 0, 0), nullptr);
}

TEST(AddressBook, AfterTheFenceTheServiceThreadFetches) {
    Book b;
    b.serving = true;
    b.book.modex_done = true;
    EXPECT_NE(b.book.port_address(1, 0), nullptr);
    EXPECT_EQ(b.wakes, 0);
}

TEST(AddressBook, AnotherJobsRanksAreTheirOwn) {
    Book b;
    const xrc::PortAddress *ours = b.book.port_address(1, 0);
    const xrc::PortAddress *theirs = b.book.other_port_address(9, 1, 0);
    ASSERT_NE(ours, nullptr);
    ASSERT_NE(theirs, nullptr);
    EXPECT_NE(ours, theirs);
    EXPECT_NE(b.book.other_port_address(9, 100, 0), nullptr);  // no job size bounds another job's ranks
}

TEST(AddressBook, AMovedPortKeepsItsNewLidForThisJob) {
    Book b;
    const xrc::PortAddress *fetched = b.book.port_address(1, 0);
    const xrc::PortAddress *other = b.book.other_port_address(9, 1, 0);
    ASSERT_NE(fetched, nullptr);
    b.book.move_port(xrc::port_identity(*fetched), 2, 50);
    EXPECT_EQ(fetched->lid, 50);  // updated in place
    EXPECT_EQ(other->lid, 2);     // another job's address is not this job's announcement
    b.book.move_port(xrc::port_identity(port(0xaa, 102, 3)), 3, 60);
    EXPECT_EQ(b.book.port_address(2, 0)->lid, 60);  // fetched after the move
    b.book.move_port(xrc::port_identity(port(0xaa, 1, 1)), 1, 70);
    EXPECT_EQ(b.book.mine().ports.front().lid, 70);
    b.book.move_port(xrc::port_identity(*fetched), 2, 80);  // not from the LID it has: unchanged
    EXPECT_EQ(fetched->lid, 50);
}
