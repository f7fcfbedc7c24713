// SPDX-License-Identifier: BSD-3-Clause
// Error: the sentences of system errors, and the fixed ones made without allocating (out of memory), which stay
// usable through a Result and take context like any other.
#include "src/core/registered_block.h"
#include "src/core/result.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>

using namespace xrc;

TEST(Error, SystemSaysWhatAndWhy) {
    const Error e = Error::system("ibv_create_srq_ex", ENOMEM);
    EXPECT_EQ(e.kind(), ErrorKind::system);
    EXPECT_EQ(e.errnum(), ENOMEM);
    EXPECT_EQ(e.message(), std::string("ibv_create_srq_ex: ") + std::strerror(ENOMEM));
}

TEST(Error, OutOfMemoryPointsAtItsStaticSentence) {
    static const char kWhat[] = "cannot allocate the thing";
    Result<void> r = Error::out_of_memory(kWhat);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind(), ErrorKind::resource);
    EXPECT_EQ(r.error().errnum(), 0);
    EXPECT_EQ(r.error().c_str(), kWhat);  // the literal itself: nothing was copied
    EXPECT_EQ(r.error().message(), kWhat);
}

TEST(Error, FixedSystemErrorKeepsItsErrno) {
    const Error e = Error::fixed(ErrorKind::system, "ibv_reg_mr failed", EACCES);
    EXPECT_EQ(e.kind(), ErrorKind::system);
    EXPECT_EQ(e.errnum(), EACCES);
    EXPECT_STREQ(e.c_str(), "ibv_reg_mr failed");
}

TEST(Error, WrapAroundAFixedSentence) {
    Error e = Error::out_of_memory("cannot allocate the rings");
    e.wrap("simhca0:1: ", " (eager RDMA off)");
    EXPECT_EQ(e.message(), "simhca0:1: cannot allocate the rings (eager RDMA off)");
    EXPECT_EQ(e.kind(), ErrorKind::resource);
}

TEST(RegisteredBlock, AllocatesZeroedBytes) {
    RegisteredBlock block;
    Result<void> ok = block.allocate(4096);
    ASSERT_TRUE(ok);
    EXPECT_EQ(block.size(), 4096u);
    EXPECT_EQ(block.data()[4095], 0);
}

TEST(RegisteredBlock, RegisteringNothingIsRefused) {
    RegisteredBlock block;
    Counters counters;
    Result<void> r = block.register_on(nullptr, IBV_ACCESS_LOCAL_WRITE, counters);
    ASSERT_FALSE(r);
    EXPECT_FALSE(block.registered());
    EXPECT_EQ(counters.registered_bytes, 0u);
}
