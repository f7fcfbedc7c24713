// SPDX-License-Identifier: BSD-3-Clause
// Prints what ibv_get_sysfs_path() returns in a fresh process (the library
// computes it once per process, so tests need a new one per case).
#include <cstdio>

extern "C" const char *ibv_get_sysfs_path(void); // rdma-core's driver.h, not shipped by Debian

int main() {
    std::printf("%s\n", ibv_get_sysfs_path());
    return 0;
}
