// SPDX-License-Identifier: BSD-3-Clause
// The attributes and masks of every XRC QP state transition the BTL makes, in one place. The masks are exactly
// the kernel's (ib_modify_qp_is_ok): required bits only, nothing the kernel rejects. In particular the XRC INI
// INIT->RTR transition carries no MAX_DEST_RD_ATOMIC and no MIN_RNR_TIMER (Open MPI's old xoob bug, #1839).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace xrc {

struct QpTransition {
    ibv_qp_attr attr{};
    int mask = 0;
};

// What both ends of a connection agree on (from the MCA parameters and the port).
struct PathSettings {
    std::uint8_t port_num = 1;
    std::uint16_t pkey_index = 0;
    ibv_mtu mtu = IBV_MTU_4096;
    std::uint8_t service_level = 0;
    std::uint8_t gid_index = 0;
    bool use_grh = false;  // needed when the peer is in another subnet
    std::uint8_t timeout = 20;
    std::uint8_t retry_count = 7;
    std::uint8_t rnr_retry = 7;
    std::uint8_t min_rnr_timer = 25;
    std::uint8_t max_rd_atomic = 4;
};

// The remote end of a connection: where to send, and which QP there.
struct RemoteQp {
    std::uint16_t lid = 0;
    ibv_gid gid{};
    std::uint32_t qp_num = 0;
    std::uint32_t psn = 0;
};

// INI (send side, IBV_QPT_XRC_SEND)
QpTransition ini_to_init(const PathSettings &path) noexcept;
QpTransition ini_to_rtr(const PathSettings &path, const RemoteQp &tgt) noexcept;
QpTransition ini_to_rts(const PathSettings &path, std::uint32_t my_psn) noexcept;

// TGT (receive side, IBV_QPT_XRC_RECV): accepts RDMA write/read and atomics from its INI peer.
QpTransition tgt_to_init(const PathSettings &path) noexcept;
QpTransition tgt_to_rtr(const PathSettings &path, const RemoteQp &ini) noexcept;
QpTransition tgt_to_rts(const PathSettings &path, std::uint32_t my_psn) noexcept;

// UD (the connection manager's datagrams): RESET->INIT with the port, pkey and our Q_Key; RTR; RTS.
QpTransition ud_to_init(const PathSettings &path, std::uint32_t qkey) noexcept;
QpTransition ud_to_rtr() noexcept;
QpTransition ud_to_rts(std::uint32_t my_psn) noexcept;

// Path migration toward a peer port's new LID (software-controlled migration, IB spec 17.2.8), RTS->RTS twice:
// load the alternate path (the QP's current primary path, `current` from ibv_query_qp with kMigrationQueryMask,
// with `new_lid`) and arm it; then MIGRATED makes it the primary one and the HCA resends there what was not
// acknowledged.
inline constexpr int kMigrationQueryMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_TIMEOUT;
QpTransition load_alternate_path(const ibv_qp_attr &current, std::uint16_t new_lid) noexcept;
QpTransition migrate_to_alternate_path() noexcept;

// The initial packet sequence number of a QP, derived from its number so both ends compute it without an
// extra exchange (24 bits).
constexpr std::uint32_t initial_psn(std::uint32_t qp_num) noexcept { return (qp_num * 2654435761u) & 0xffffffu; }

// ibv_mtu from bytes (256..4096); IBV_MTU_4096 for anything else (callers validate first).
ibv_mtu mtu_from_bytes(int bytes) noexcept;
int mtu_to_bytes(ibv_mtu mtu) noexcept;

}  // namespace xrc
