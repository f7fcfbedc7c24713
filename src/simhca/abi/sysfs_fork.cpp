// SPDX-License-Identifier: BSD-3-Clause
// sysfs helpers and fork support of libibverbs (no device state).
// Exported whatever -fvisibility the library is built with: the version script alone decides what is
// local (abi/libibverbs.map).
#pragma GCC visibility push(default)

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <string>
#include <unistd.h>

extern "C" {
// Declared in rdma-core's driver.h, which Debian does not ship.
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);

// The software HCA's sysfs view (lib/device.cpp; nullptr while no daemon answers). Internal to the library.
const char *simhca_sysfs_root(void) noexcept;
}

// Like rdma-core: $SYSFS_PATH (trailing slashes removed) if set, computed once, because callers keep the
// returned pointer. Without it, the daemon's sysfs view (its root holds class/infiniband/simhca0) before
// /sys, so rdma-core users such as Open MPI's openib find the device without simhca-run setting SYSFS_PATH.
// That root, once found, stays the same for the process; while no daemon answers, each call asks again.
const char *ibv_get_sysfs_path(void)
{
    static std::once_flag once;
    static std::string env_path;
    static bool have_env = false;
    std::call_once(once, [] {
        const char *env = std::getenv("SYSFS_PATH");
        if (!env)
            return;
        have_env = true;
        env_path = env;
        while (env_path.size() > 1 && env_path.back() == '/')
            env_path.pop_back();
    });
    if (have_env)
        return env_path.c_str();
    if (const char *root = simhca_sysfs_root())
        return root;
    return "/sys";
}

// Reads DIR/FILE into BUF. Same contract as rdma-core 44: returns the length without one trailing newline
// and NUL-terminates; an empty file gives 0 and leaves BUF alone; a file that fills BUF completely (no room
// for the terminator) gives -1; a file that cannot be opened gives -1 with errno from open(2).
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
    std::string path = std::string(dir) + "/" + file;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t len = read(fd, buf, size);
    int saved = errno;
    close(fd);
    if (len < 0) {
        errno = saved;
        return -1;
    }
    if (len == 0)
        return 0;
    if (buf[len - 1] == '\n') {
        buf[--len] = '\0';
    } else if (static_cast<size_t>(len) < size) {
        buf[len] = '\0';
    } else {
        errno = EOVERFLOW; // rdma-core leaves errno as it was; a reason is kinder
        return -1;
    }
    return static_cast<int>(len);
}

// Fork support. A real HCA DMAs into physical pages, so after fork() copy-on-write could leave it writing
// into the child's copy; that is why rdma-core has ibv_fork_init/madvise(DONTFORK). The software HCA writes
// with process_vm_writev into the registering process's *virtual* addresses, which always resolve to that
// process's current pages, so fork is safe without anything: we report IBV_FORK_UNNEEDED, as rdma-core does
// on kernels with copy-on-fork pinning, and the range calls have nothing to do.
int ibv_fork_init(void)
{
    return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
    return IBV_FORK_UNNEEDED;
}

int ibv_dontfork_range(void *, size_t)
{
    return 0;
}

int ibv_dofork_range(void *, size_t)
{
    return 0;
}
