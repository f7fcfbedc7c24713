// The device as the file system shows it: a sysfs-like directory (ibdev_path points at it) with the files hwloc
// and the rdma tools read, and, on request, its uverbs character device.
#pragma once
#include <cstdint>
#include <string>

namespace simhca {

// Creates/refreshes the files; returns false with `err` set on failure.
bool write_sysfs(const std::string &dir, uint16_t lid, std::string &err);

// DIR/uverbs0 (DIR is /dev/infiniband on a node of its own), a character device with the kernel's numbers for
// the first uverbs device, mode 0666 as rdma-core's udev rules make it, for as long as this object lives.
// Programs find RDMA devices by that file: rdma-core lists only devices whose file exists, UCX takes only
// devices whose file is a character device it may read and write. Nothing opens it: the library reaches
// the daemon through its socket (opening it gives ENXIO, as a uverbs file without its device does).
class UverbsFile {
public:
    UverbsFile() = default;
    UverbsFile(const UverbsFile &) = delete;
    UverbsFile &operator=(const UverbsFile &) = delete;
    ~UverbsFile();
    // Creates DIR (and its parents) and the file, replacing a stale one; false with `err` set on failure.
    bool create(const std::string &dir, std::string &err);

private:
    std::string path_;
};

} // namespace simhca
