// SPDX-License-Identifier: BSD-3-Clause
// Reproduces the rules of the kernel's qp_state_table for the QP types the
// software HCA supports (RC, UD, XRC INI = XRC_SEND, XRC TGT = XRC_RECV),
// expressed as (required, optional) masks per transition.
#include "qp_transitions.hpp"

namespace simhca {

namespace {

struct Rule {
    bool valid;
    int req;
    int opt;
};

enum Kind { RC, UC, UD, INI, TGT, OTHER };

Kind kind_of(ibv_qp_type t) {
    switch (t) {
    case IBV_QPT_RC: return RC;
    case IBV_QPT_UC: return UC;
    case IBV_QPT_UD: return UD;
    case IBV_QPT_XRC_SEND: return INI;
    case IBV_QPT_XRC_RECV: return TGT;
    default: return OTHER;
    }
}

constexpr int kPkeyPortAccess = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kPkeyPortQkey = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
constexpr int kConnRtr = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
constexpr int kRdAtomRnr = IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kSenderRts = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC;
constexpr int kConnRtsOpt = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE;

// RTS->RTS and SQD->RTS: nothing required, the same optional attributes.
Rule to_rts_again(Kind k) {
    switch (k) {
    case UD: return {true, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY};
    case RC:
    case TGT: return {true, 0, kConnRtsOpt | IBV_QP_MIN_RNR_TIMER};
    case INI:
    case UC: return {true, 0, kConnRtsOpt};
    default: return {false, 0, 0};
    }
}

Rule rule_for(ibv_qp_state cur, ibv_qp_state next, Kind k) {
    // Leaving to RESET or ERR is allowed from every state but RESET->ERR.
    if (next == IBV_QPS_RESET) return {true, 0, 0};
    if (next == IBV_QPS_ERR) return {cur != IBV_QPS_RESET, 0, 0};

    switch (cur) {
    case IBV_QPS_RESET:
        if (next != IBV_QPS_INIT) break;
        if (k == UD) return {true, kPkeyPortQkey, 0};
        return {true, kPkeyPortAccess, 0};
    case IBV_QPS_INIT:
        if (next == IBV_QPS_INIT) return {true, 0, k == UD ? kPkeyPortQkey : kPkeyPortAccess};
        if (next == IBV_QPS_RTR) {
            switch (k) {
            case UD: return {true, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY};
            case RC:
            case TGT:
                return {true, kConnRtr | kRdAtomRnr,
                        IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
            case INI:
            case UC:
                return {true, kConnRtr, IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
            default: break;
            }
        }
        break;
    case IBV_QPS_RTR:
        if (next != IBV_QPS_RTS) break;
        switch (k) {
        case UD: return {true, IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | IBV_QP_QKEY};
        case UC: return {true, IBV_QP_SQ_PSN, kConnRtsOpt};
        case RC: return {true, kSenderRts, kConnRtsOpt | IBV_QP_MIN_RNR_TIMER};
        case INI: return {true, kSenderRts, kConnRtsOpt};
        case TGT: return {true, IBV_QP_TIMEOUT | IBV_QP_SQ_PSN, kConnRtsOpt | IBV_QP_MIN_RNR_TIMER};
        default: break;
        }
        break;
    case IBV_QPS_RTS:
        if (next == IBV_QPS_RTS) return to_rts_again(k);
        if (next == IBV_QPS_SQD) return {k != OTHER, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY};
        break;
    case IBV_QPS_SQD:
        if (next == IBV_QPS_RTS) return to_rts_again(k);
        if (next == IBV_QPS_SQD) {
            switch (k) {
            case UD: return {true, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY};
            case UC:
                return {true, 0,
                        IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PATH_MIG_STATE};
            case RC:
                return {true, 0,
                        IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                            IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_ALT_PATH |
                            IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_MIN_RNR_TIMER |
                            IBV_QP_PATH_MIG_STATE};
            case INI:
                return {true, 0,
                        IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                            IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
                            IBV_QP_PKEY_INDEX | IBV_QP_PATH_MIG_STATE};
            case TGT:
                return {true, 0,
                        IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_MAX_DEST_RD_ATOMIC |
                            IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                            IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE};
            default: break;
            }
        }
        break;
    case IBV_QPS_SQE:
        // Only UD/UC (and special QPs) may recover from SQE.
        if (next == IBV_QPS_RTS && k == UD) return {true, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY};
        if (next == IBV_QPS_RTS && k == UC) return {true, 0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS};
        break;
    default: break;
    }
    return {false, 0, 0};
}

} // namespace

bool modify_qp_is_ok(ibv_qp_state cur, ibv_qp_state next, ibv_qp_type type, int mask) {
    if (cur < IBV_QPS_RESET || cur > IBV_QPS_ERR || next < IBV_QPS_RESET || next > IBV_QPS_ERR) return false;
    if ((mask & IBV_QP_CUR_STATE) && cur != IBV_QPS_RTR && cur != IBV_QPS_RTS && cur != IBV_QPS_SQD &&
        cur != IBV_QPS_SQE)
        return false;
    Kind k = kind_of(type);
    if (k == OTHER) return false;
    Rule r = rule_for(cur, next, k);
    if (!r.valid) return false;
    if ((mask & r.req) != r.req) return false;
    if (mask & ~(r.req | r.opt | IBV_QP_STATE)) return false;
    return true;
}

} // namespace simhca
