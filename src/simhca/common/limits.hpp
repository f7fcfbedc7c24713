// SPDX-License-Identifier: BSD-3-Clause
// Device identity and limits, shared by the daemon (enforcement) and the
// library (ibv_query_device). Values are modelled on a ConnectX-4 class HCA
// so that tools and Open MPI's device table treat it as ordinary hardware.
#pragma once
#include <cstdint>
#include "shm_layout.hpp"

namespace simhca::limits {

constexpr uint32_t kVendorId = 0x02c9;
constexpr uint32_t kVendorPartId = 4119;
constexpr uint32_t kHwVer = 0;
constexpr const char *kFwVer = "1.0.0";
constexpr const char *kDeviceName = "simhca0";
// The device's uverbs file name (ibv_device::dev_name; /dev/infiniband/<name> when the daemon is given a device
// directory) and the numbers the kernel gives the first uverbs device (IB_UVERBS_MAJOR, IB_UVERBS_BASE_MINOR).
constexpr const char *kUverbsName = "uverbs0";
constexpr unsigned kUverbsMajor = 231;
constexpr unsigned kUverbsMinor = 192;

constexpr uint32_t kMaxQp = 16384;
constexpr uint32_t kMaxQpWr = 16384;
constexpr uint32_t kMaxSge = shm::kMaxSge;
constexpr uint32_t kMaxInline = shm::kMaxInline;
constexpr uint32_t kMaxCq = 16384;
constexpr uint32_t kMaxCqe = 4194303;
constexpr uint32_t kMaxMr = 65536;
constexpr uint32_t kMaxPd = 16384;
constexpr uint32_t kMaxQpRdAtom = 16;
constexpr uint32_t kMaxSrq = 16384;
constexpr uint32_t kMaxSrqWr = 16383;
constexpr uint32_t kMaxAh = 65536;
constexpr uint32_t kMaxMcastGrp = 256;        // multicast groups per device
constexpr uint32_t kMaxMcastQpAttach = 64;    // QPs per group
constexpr uint32_t kMcastLidBase = 0xc000;    // multicast LIDs: 0xc000..0xfffe
constexpr uint32_t kMulticastQpn = 0xffffff;  // the destination QPN of every multicast datagram
constexpr uint32_t kMaxMsgSize = 0x40000000;
constexpr uint32_t kMaxUdPayload = 4096;
constexpr uint64_t kMaxDm = 256 * 1024; // device memory per device (mlx5-like)
constexpr uint16_t kPkeyDefault = 0xffff;
// GID table entries per port. As on InfiniBand HCAs, only index 0 (subnet prefix + port GUID) is populated; the
// others read as zero GIDs (ibv_query_gid) or ENODATA (ibv_query_gid_ex), as the kernel reports empty entries.
constexpr uint32_t kGidTableLen = 8;
// Tag matching (TM SRQs), advertised in ibv_device_attr_ex::tm_caps. mlx5-like: one SGE per tagged buffer,
// 64-byte rendezvous requests (TMH + RVH + 32 bytes the receiver's software sees when it is unexpected).
constexpr uint32_t kTmMaxNumTags = 127;   // tagged buffers in one TM SRQ's matching list
constexpr uint32_t kTmMaxOps = 1024;      // outstanding list operations
constexpr uint32_t kTmMaxSge = 1;
constexpr uint32_t kTmMaxRndvHdrSize = 64;

// Node GUID / port GID derive from the LID (the fabric file is the SM).
inline uint64_t node_guid_for_lid(uint16_t lid) { return 0x0002c90300a10000ull | lid; }
constexpr uint64_t kSubnetPrefix = 0xfe80000000000000ull;

} // namespace simhca::limits
