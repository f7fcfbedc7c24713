// A sysfs-like directory for the device (ibdev_path points at it) with the
// files hwloc and the rdma tools read.
#pragma once
#include <cstdint>
#include <string>

namespace simhca {

// Creates/refreshes the files; returns false with `err` set on failure.
bool write_sysfs(const std::string &dir, uint16_t lid, std::string &err);

} // namespace simhca
