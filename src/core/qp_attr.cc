// SPDX-License-Identifier: BSD-3-Clause
#include "qp_attr.h"

namespace xrc {
namespace {

ibv_ah_attr address_vector(const PathSettings &path, std::uint16_t lid, const ibv_gid &gid) noexcept {
    ibv_ah_attr ah{};
    ah.dlid = lid;
    ah.sl = path.service_level;
    ah.src_path_bits = 0;
    ah.port_num = path.port_num;
    if (path.use_grh) {
        ah.is_global = 1;
        ah.grh.dgid = gid;
        ah.grh.sgid_index = path.gid_index;
        ah.grh.hop_limit = 255;
    }
    return ah;
}

}  // namespace

QpTransition ini_to_init(const PathSettings &path) noexcept {
    QpTransition t;
    t.attr.qp_state = IBV_QPS_INIT;
    t.attr.pkey_index = path.pkey_index;
    t.attr.port_num = path.port_num;
    t.attr.qp_access_flags = 0;
    t.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    return t;
}

QpTransition ini_to_rtr(const PathSettings &path, const RemoteQp &tgt) noexcept {
    QpTransition t;
    t.attr.qp_state = IBV_QPS_RTR;
    t.attr.ah_attr = address_vector(path, tgt.lid, tgt.gid);
    t.attr.path_mtu = path.mtu;
    t.attr.dest_qp_num = tgt.qp_num;
    t.attr.rq_psn = tgt.psn;
    t.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    return t;
}

QpTransition ini_to_rts(const PathSettings &path, std::uint32_t my_psn) noexcept {
    QpTransition t;
    t.attr.qp_state = IBV_QPS_RTS;
    t.attr.timeout = path.timeout;
    t.attr.retry_cnt = path.retry_count;
    t.attr.rnr_retry = path.rnr_retry;
    t.attr.sq_psn = my_psn;
    t.attr.max_rd_atomic = path.max_rd_atomic;
    t.mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
             IBV_QP_MAX_QP_RD_ATOMIC;
    return t;
}

QpTransition tgt_to_init(const PathSettings &path) noexcept {
    QpTransition t;
    t.attr.qp_state = IBV_QPS_INIT;
    t.attr.pkey_index = path.pkey_index;
    t.attr.port_num = path.port_num;
    t.attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    t.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    return t;
}

QpTransition tgt_to_rtr(const PathSettings &path, const RemoteQp &ini) noexcept {
    // The INI transition plus what only a responder sets.
    QpTransition t = ini_to_rtr(path, ini);
    t.attr.max_dest_rd_atomic = path.max_rd_atomic;
    t.attr.min_rnr_timer = path.min_rnr_timer;
    t.mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    return t;
}

QpTransition tgt_to_rts(const PathSettings &path, std::uint32_t my_psn) noexcept {
    QpTransition t;
    t.attr.qp_state = IBV_QPS_RTS;
    t.attr.timeout = path.timeout;
    t.attr.sq_psn = my_psn;
    t.mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
    return t;
}

QpTransition ud_to_init(const PathSettings &path, std::uint32_t qkey) noexcept {
    QpTransition t;
    t.attr.qp_state = IBV_QPS_INIT;
    t.attr.pkey_index = path.pkey_index;
    t.attr.port_num = path.port_num;
    t.attr.qkey = qkey;
    t.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
    return t;
}

QpTransition ud_to_rtr() noexcept {
    QpTransition t;
    t.attr.qp_state = IBV_QPS_RTR;
    t.mask = IBV_QP_STATE;
    return t;
}

QpTransition ud_to_rts(std::uint32_t my_psn) noexcept {
    QpTransition t;
    t.attr.qp_state = IBV_QPS_RTS;
    t.attr.sq_psn = my_psn;
    t.mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    return t;
}

QpTransition load_alternate_path(const ibv_qp_attr &current, std::uint16_t new_lid) noexcept {
    QpTransition t;
    t.attr.qp_state = IBV_QPS_RTS;
    t.attr.alt_ah_attr = current.ah_attr;  // service level, GRH and port as before: only the LID moved
    t.attr.alt_ah_attr.dlid = new_lid;
    t.attr.alt_port_num = current.ah_attr.port_num != 0 ? current.ah_attr.port_num : current.port_num;
    t.attr.alt_ah_attr.port_num = t.attr.alt_port_num;
    t.attr.alt_pkey_index = current.pkey_index;
    t.attr.alt_timeout = current.timeout;
    t.attr.path_mig_state = IBV_MIG_REARM;
    t.mask = IBV_QP_STATE | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;
    return t;
}

QpTransition migrate_to_alternate_path() noexcept {
    QpTransition t;
    t.attr.qp_state = IBV_QPS_RTS;
    t.attr.path_mig_state = IBV_MIG_MIGRATED;
    t.mask = IBV_QP_STATE | IBV_QP_PATH_MIG_STATE;
    return t;
}

ibv_mtu mtu_from_bytes(int bytes) noexcept {
    switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
    }
}

int mtu_to_bytes(ibv_mtu mtu) noexcept { return 128 << static_cast<int>(mtu); }

}  // namespace xrc
