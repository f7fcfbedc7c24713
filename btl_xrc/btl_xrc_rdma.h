// SPDX-License-Identifier: BSD-3-Clause
// RDMA (put/get), atomics, flush, memory registration through Open MPI's rcache, and async device events.
#pragma once

#include "btl_xrc.h"

int mca_btl_xrc_put(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, void *local_address,
                    uint64_t remote_address, mca_btl_base_registration_handle_t *local_handle,
                    mca_btl_base_registration_handle_t *remote_handle, size_t size, int flags, int order,
                    mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata) noexcept;
int mca_btl_xrc_get(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, void *local_address,
                    uint64_t remote_address, mca_btl_base_registration_handle_t *local_handle,
                    mca_btl_base_registration_handle_t *remote_handle, size_t size, int flags, int order,
                    mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext, void *cbdata) noexcept;
int mca_btl_xrc_atomic_op(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, uint64_t remote_address,
                          mca_btl_base_registration_handle_t *remote_handle, mca_btl_base_atomic_op_t op,
                          uint64_t operand, int flags, int order, mca_btl_base_rdma_completion_fn_t cbfunc,
                          void *cbcontext, void *cbdata) noexcept;
int mca_btl_xrc_atomic_fop(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, void *local_address,
                           uint64_t remote_address, mca_btl_base_registration_handle_t *local_handle,
                           mca_btl_base_registration_handle_t *remote_handle, mca_btl_base_atomic_op_t op,
                           uint64_t operand, int flags, int order, mca_btl_base_rdma_completion_fn_t cbfunc,
                           void *cbcontext, void *cbdata) noexcept;
int mca_btl_xrc_atomic_cswap(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint, void *local_address,
                             uint64_t remote_address, mca_btl_base_registration_handle_t *local_handle,
                             mca_btl_base_registration_handle_t *remote_handle, uint64_t compare, uint64_t value,
                             int flags, int order, mca_btl_base_rdma_completion_fn_t cbfunc, void *cbcontext,
                             void *cbdata) noexcept;
// Whether the owner of an RDMA operation moves its data another way when the operation is refused or fails: ob1
// does (a put's range goes by sends, a get asks the sender to send it); osc/rdma does not (Open MPI 4.1 and 5.0
// post a refused operation again forever, ompi_osc_rdma_master, and take a failed one's error for success,
// ompi_osc_rdma_get_complete). ob1 reaches a BTL through the BML, which passes its mca_bml_base_btl_t (this module
// and endpoint, ompi/mca/bml/bml.h) as the callback's context; any other caller is taken for one that cannot
// recover, and a failed RDMA of its ends the job (which loses nothing) rather than its data.
bool mca_btl_xrc_rdma_caller_recovers(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint,
                                      const void *cbcontext) noexcept;
// RDMA refused toward a peer its rail no longer reaches (btl_xrc_failover.cc): accepted, and its callback hears of
// the failure from the next progress call. The lock is held.
int mca_btl_xrc_rdma_refuse(mca_btl_xrc_module_t *module, mca_btl_base_endpoint_t *endpoint, void *local_address,
                            mca_btl_base_registration_handle_t *local_handle, mca_btl_base_rdma_completion_fn_t cbfunc,
                            void *cbcontext, void *cbdata) noexcept;
int mca_btl_xrc_flush(mca_btl_base_module_t *btl, mca_btl_base_endpoint_t *endpoint) noexcept;
mca_btl_base_registration_handle_t *mca_btl_xrc_register_mem(mca_btl_base_module_t *btl,
                                                             mca_btl_base_endpoint_t *endpoint, void *base, size_t size,
                                                             uint32_t flags) noexcept;
int mca_btl_xrc_deregister_mem(mca_btl_base_module_t *btl, mca_btl_base_registration_handle_t *handle) noexcept;

// Reports an error completion of `queue` through mca_btl_xrc_report_error, naming the operation that failed (RDMA
// read or write, atomic, send; its size and remote address) and its peer. Call it before queue.on_completion(wc),
// which completes (and releases) that operation.
void mca_btl_xrc_report_failed_completion(mca_btl_xrc_module_t *module, const xrc::SendQueue &queue,
                                          const ibv_wc &wc) noexcept;

int mca_btl_xrc_rdma_init(mca_btl_xrc_module_t *module) noexcept;
void mca_btl_xrc_rdma_fini(mca_btl_xrc_module_t *module) noexcept;
void mca_btl_xrc_async_init(mca_btl_xrc_module_t *module) noexcept;
void mca_btl_xrc_async_fini(mca_btl_xrc_module_t *module) noexcept;
