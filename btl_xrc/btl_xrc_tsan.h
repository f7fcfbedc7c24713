// SPDX-License-Identifier: BSD-3-Clause
// ThreadSanitizer build (--enable-tsan, which defines BTL_XRC_TSAN for the plugin): how an order Open MPI gives,
// in code ThreadSanitizer does not see, is told to it. Open MPI's lock-free free lists (the rcache's registrations,
// our fragments: btl_xrc_frag.h) hand an object from the thread that returned it to the next one that takes it;
// the returning side calls BTL_XRC_TSAN_RELEASE(object) after its last access, the taking side
// BTL_XRC_TSAN_ACQUIRE(object) before its first. Nothing in other builds.
#pragma once

#ifdef BTL_XRC_TSAN
#include <sanitizer/tsan_interface.h>
#define BTL_XRC_TSAN_ACQUIRE(object) __tsan_acquire(static_cast<void *>(object))
#define BTL_XRC_TSAN_RELEASE(object) __tsan_release(static_cast<void *>(object))
#else
#define BTL_XRC_TSAN_ACQUIRE(object) static_cast<void>(object)
#define BTL_XRC_TSAN_RELEASE(object) static_cast<void>(object)
#endif
