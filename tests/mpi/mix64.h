// SPDX-License-Identifier: BSD-3-Clause
/* The test programs' data pattern: a 64-bit finaliser (MurmurHash3's fmix64) turns a message's coordinates (source,
 * destination, size, iteration, offset) into bytes that differ at every position, so a byte landing in the wrong
 * message, at the wrong offset or from an old iteration does not match. */
#pragma once
#include <stdint.h>

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}
