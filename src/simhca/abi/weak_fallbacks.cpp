// SPDX-License-Identifier: BSD-3-Clause
// Exported verbs whose real behaviour belongs to the device side (core's src/simhca/lib), defined here WEAK
// so that the library always exports them (BIND_NOW binaries need the symbol) while a strong definition in
// core's code, when it exists, silently replaces these at link time (same shared object: the linker picks the
// strong one, no duplicate-definition error). Each fallback fails cleanly or gives the conservative answer.
// Exported whatever -fvisibility the library is built with: the version script alone decides what is
// local (abi/libibverbs.map).
#pragma GCC visibility push(default)

#include <infiniband/verbs.h>

#include <cerrno>

#define SIMHCA_WEAK __attribute__((weak))

// Needs the library's QP layout (is this QP an extended one?). Without core's answer: no ibv_qp_ex.
SIMHCA_WEAK struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *)
{
    errno = EOPNOTSUPP;
    return nullptr;
}

// 0 = "no in-order guarantee beyond the verbs rules", the answer rdma-core gives when a provider does not
// implement the query; always correct, merely pessimistic.
SIMHCA_WEAK int ibv_query_qp_data_in_order(struct ibv_qp *, enum ibv_wr_opcode, uint32_t)
{
    return 0;
}

// Enhanced connection establishment (RoCE vendor options): not part of InfiniBand XRC; a device without it
// answers EOPNOTSUPP (the errno value is the return value).
SIMHCA_WEAK int ibv_set_ece(struct ibv_qp *, struct ibv_ece *)
{
    errno = EOPNOTSUPP;
    return EOPNOTSUPP;
}

SIMHCA_WEAK int ibv_query_ece(struct ibv_qp *, struct ibv_ece *)
{
    errno = EOPNOTSUPP;
    return EOPNOTSUPP;
}

// Device memory import: lib/dm.cpp defines the real ibv_import_dm / ibv_unimport_dm (strong symbols win); this
// weak fallback only guarantees the symbol exists (pyverbs links it BIND_NOW) in a build without that file.
SIMHCA_WEAK struct ibv_dm *ibv_import_dm(struct ibv_context *, uint32_t)
{
    errno = EOPNOTSUPP;
    return nullptr;
}

SIMHCA_WEAK void ibv_unimport_dm(struct ibv_dm *) {}
