// SPDX-License-Identifier: BSD-3-Clause
// Device locality: when several devices can be used, a process uses the ones attached to the CPUs it runs on.
// The device's CPUs come from <ibdev_path>/device/local_cpus (the sysfs file on real hardware, the software
// HCA's equivalent under simulation; hwloc's own verbs helper reads a fixed /sys path and would miss the
// latter), the process's from its affinity mask.
#pragma once

#include "device_discovery.h"

#include <string>
#include <vector>

namespace xrc {

// Removes the devices that are not local to the process, when at least one device is local and at least one is
// not; otherwise (unbound process, no locality information, all alike) keeps every device. Returns one line per
// decision for the verbose output.
std::vector<std::string> keep_nearest_devices(std::vector<OpenedDevice> &devices);

// The decision itself: which of the devices whose local_cpus files are given are near a process that may run on
// `process_cpus` (CPU numbers). All true when the answer would drop every device or none.
std::vector<bool> near_devices(const std::vector<std::string> &local_cpus_paths,
                               const std::vector<unsigned> &process_cpus);

}  // namespace xrc
