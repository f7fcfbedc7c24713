// SPDX-License-Identifier: BSD-3-Clause
#include "device_locality.h"

#include <hwloc.h>
#include <hwloc/linux.h>
#include <sched.h>

#include <memory>

namespace xrc {
namespace {

using Bitmap = std::unique_ptr<hwloc_bitmap_s, decltype(&hwloc_bitmap_free)>;

Bitmap new_bitmap() { return Bitmap(hwloc_bitmap_alloc(), &hwloc_bitmap_free); }

std::vector<unsigned> affinity() {
    std::vector<unsigned> cpus;
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (sched_getaffinity(0, sizeof(mask), &mask) == 0)
        for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
            if (CPU_ISSET(cpu, &mask)) cpus.push_back(static_cast<unsigned>(cpu));
    return cpus;
}

}  // namespace

std::vector<bool> near_devices(const std::vector<std::string> &local_cpus_paths,
                               const std::vector<unsigned> &process_cpus) {
    std::vector<bool> near(local_cpus_paths.size(), true);
    Bitmap mine = new_bitmap();
    if (!mine) return near;
    for (unsigned cpu : process_cpus) hwloc_bitmap_set(mine.get(), cpu);
    std::size_t near_count = 0;
    for (std::size_t i = 0; i < local_cpus_paths.size(); ++i) {
        Bitmap cpus = new_bitmap();
        if (!cpus || hwloc_linux_read_path_as_cpumask(local_cpus_paths[i].c_str(), cpus.get()) != 0)
            hwloc_bitmap_zero(cpus.get());
        // Unknown locality counts as near: never drop a device for lack of information.
        near[i] = hwloc_bitmap_iszero(cpus.get()) || hwloc_bitmap_intersects(cpus.get(), mine.get());
        near_count += near[i];
    }
    if (near_count == 0) near.assign(near.size(), true);
    return near;
}

std::vector<std::string> keep_nearest_devices(std::vector<OpenedDevice> &devices) {
    std::vector<std::string> notes;
    if (devices.size() < 2) return notes;
    std::vector<std::string> paths;
    for (const auto &d : devices)
        paths.push_back(d.context && d.context->device ? std::string(d.context->device->ibdev_path) + "/device/local_cpus"
                                                       : std::string());
    const auto near = near_devices(paths, affinity());
    std::vector<OpenedDevice> kept;
    for (std::size_t i = 0; i < devices.size(); ++i) {
        if (near[i])
            kept.push_back(std::move(devices[i]));
        else
            notes.push_back(devices[i].name + ": not attached to this process's CPUs (btl_xrc_ignore_locality 1 uses it anyway)");
    }
    devices = std::move(kept);
    return notes;
}

}  // namespace xrc
