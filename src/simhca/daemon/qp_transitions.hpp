// SPDX-License-Identifier: BSD-3-Clause
// The kernel's QP state transition table (ib_modify_qp_is_ok): which
// attribute mask bits are required / allowed for each (cur, next, type).
#pragma once
#include <infiniband/verbs.h>

namespace simhca {

bool modify_qp_is_ok(ibv_qp_state cur, ibv_qp_state next, ibv_qp_type type, int mask);

} // namespace simhca
