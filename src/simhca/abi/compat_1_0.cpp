// SPDX-License-Identifier: BSD-3-Clause
// The non-default (compat) symbol versions: the 33 entry points of the IBVERBS_1.0 ABI, and
// ibv_register_driver@IBVERBS_1.1.
//
// Why they exist at all: rdma-core 44 still exports them, and the ABI test (and any binary built before
// 2006) needs them to resolve. Why they only fail: the 1.0 ABI passes different structs (ibv_device_1_0,
// ibv_context_1_0, ... each wrapping the real object), so forwarding to the current functions would hand
// them the wrong layout; no binary in Debian 12 uses them. Each returns the failure value its man page
// documents for its return type (NULL, -1, or an errno value) with errno = EOPNOTSUPP, and never touches
// its arguments.
//
// The version is attached with GCC's symver attribute ("name@VERSION", one '@' = not the default); the
// nodes themselves come from abi/libibverbs.map. The C++ names are internal (local in the map).
// Exported whatever -fvisibility the library is built with: the version script alone decides what is
// local (abi/libibverbs.map).
#pragma GCC visibility push(default)

#include <cerrno>
#include <cstddef>
#include <cstdint>

// The 1.0 ABI's object types; never dereferenced here.
struct ibv_device_1_0;
struct ibv_context_1_0;
struct ibv_pd_1_0;
struct ibv_mr_1_0;
struct ibv_cq_1_0;
struct ibv_qp_1_0;
struct ibv_srq_1_0;
struct ibv_ah_1_0;
struct ibv_device_attr;
struct ibv_port_attr;
struct ibv_async_event;
struct ibv_comp_channel;
struct ibv_ah_attr;
struct ibv_qp_init_attr;
struct ibv_qp_attr;
struct ibv_srq_init_attr;
struct ibv_srq_attr;
union ibv_gid;

#define COMPAT_1_0(name) __attribute__((symver(#name "@IBVERBS_1.0"), used))

namespace {

template <typename T>
T unsupported(T value)
{
    errno = EOPNOTSUPP;
    return value;
}

} // namespace

extern "C" {

// --- device list and context -------------------------------------------------------------------------
COMPAT_1_0(ibv_get_device_list) ibv_device_1_0 **simhca_compat_1_0_get_device_list(int *num_devices)
{
    if (num_devices)
        *num_devices = 0;
    return unsupported<ibv_device_1_0 **>(nullptr);
}

COMPAT_1_0(ibv_free_device_list) void simhca_compat_1_0_free_device_list(ibv_device_1_0 **) {}

COMPAT_1_0(ibv_get_device_name) const char *simhca_compat_1_0_get_device_name(ibv_device_1_0 *)
{
    return unsupported<const char *>(nullptr);
}

COMPAT_1_0(ibv_get_device_guid) uint64_t simhca_compat_1_0_get_device_guid(ibv_device_1_0 *)
{
    return unsupported<uint64_t>(0);
}

COMPAT_1_0(ibv_open_device) ibv_context_1_0 *simhca_compat_1_0_open_device(ibv_device_1_0 *)
{
    return unsupported<ibv_context_1_0 *>(nullptr);
}

COMPAT_1_0(ibv_close_device) int simhca_compat_1_0_close_device(ibv_context_1_0 *)
{
    return unsupported(-1);
}

COMPAT_1_0(ibv_get_async_event)
int simhca_compat_1_0_get_async_event(ibv_context_1_0 *, ibv_async_event *)
{
    return unsupported(-1);
}

COMPAT_1_0(ibv_ack_async_event) void simhca_compat_1_0_ack_async_event(ibv_async_event *) {}

// --- queries ------------------------------------------------------------------------------------------
COMPAT_1_0(ibv_query_device) int simhca_compat_1_0_query_device(ibv_context_1_0 *, ibv_device_attr *)
{
    return unsupported(EOPNOTSUPP);
}

COMPAT_1_0(ibv_query_port)
int simhca_compat_1_0_query_port(ibv_context_1_0 *, uint8_t, ibv_port_attr *)
{
    return unsupported(EOPNOTSUPP);
}

COMPAT_1_0(ibv_query_gid) int simhca_compat_1_0_query_gid(ibv_context_1_0 *, uint8_t, int, ibv_gid *)
{
    return unsupported(-1);
}

COMPAT_1_0(ibv_query_pkey) int simhca_compat_1_0_query_pkey(ibv_context_1_0 *, uint8_t, int, uint16_t *)
{
    return unsupported(-1);
}

// --- PD and MR ----------------------------------------------------------------------------------------
COMPAT_1_0(ibv_alloc_pd) ibv_pd_1_0 *simhca_compat_1_0_alloc_pd(ibv_context_1_0 *)
{
    return unsupported<ibv_pd_1_0 *>(nullptr);
}

COMPAT_1_0(ibv_dealloc_pd) int simhca_compat_1_0_dealloc_pd(ibv_pd_1_0 *)
{
    return unsupported(EOPNOTSUPP);
}

COMPAT_1_0(ibv_reg_mr) ibv_mr_1_0 *simhca_compat_1_0_reg_mr(ibv_pd_1_0 *, void *, size_t, int)
{
    return unsupported<ibv_mr_1_0 *>(nullptr);
}

COMPAT_1_0(ibv_dereg_mr) int simhca_compat_1_0_dereg_mr(ibv_mr_1_0 *)
{
    return unsupported(EOPNOTSUPP);
}

// --- CQ -----------------------------------------------------------------------------------------------
COMPAT_1_0(ibv_create_cq)
ibv_cq_1_0 *simhca_compat_1_0_create_cq(ibv_context_1_0 *, int, void *, ibv_comp_channel *, int)
{
    return unsupported<ibv_cq_1_0 *>(nullptr);
}

COMPAT_1_0(ibv_resize_cq) int simhca_compat_1_0_resize_cq(ibv_cq_1_0 *, int)
{
    return unsupported(EOPNOTSUPP);
}

COMPAT_1_0(ibv_destroy_cq) int simhca_compat_1_0_destroy_cq(ibv_cq_1_0 *)
{
    return unsupported(EOPNOTSUPP);
}

COMPAT_1_0(ibv_get_cq_event)
int simhca_compat_1_0_get_cq_event(ibv_comp_channel *, ibv_cq_1_0 **cq, void **cq_context)
{
    if (cq)
        *cq = nullptr;
    if (cq_context)
        *cq_context = nullptr;
    return unsupported(-1);
}

COMPAT_1_0(ibv_ack_cq_events) void simhca_compat_1_0_ack_cq_events(ibv_cq_1_0 *, unsigned int) {}

// --- SRQ ----------------------------------------------------------------------------------------------
COMPAT_1_0(ibv_create_srq) ibv_srq_1_0 *simhca_compat_1_0_create_srq(ibv_pd_1_0 *, ibv_srq_init_attr *)
{
    return unsupported<ibv_srq_1_0 *>(nullptr);
}

COMPAT_1_0(ibv_modify_srq) int simhca_compat_1_0_modify_srq(ibv_srq_1_0 *, ibv_srq_attr *, int)
{
    return unsupported(EOPNOTSUPP);
}

COMPAT_1_0(ibv_query_srq) int simhca_compat_1_0_query_srq(ibv_srq_1_0 *, ibv_srq_attr *)
{
    return unsupported(EOPNOTSUPP);
}

COMPAT_1_0(ibv_destroy_srq) int simhca_compat_1_0_destroy_srq(ibv_srq_1_0 *)
{
    return unsupported(EOPNOTSUPP);
}

// --- QP -----------------------------------------------------------------------------------------------
COMPAT_1_0(ibv_create_qp) ibv_qp_1_0 *simhca_compat_1_0_create_qp(ibv_pd_1_0 *, ibv_qp_init_attr *)
{
    return unsupported<ibv_qp_1_0 *>(nullptr);
}

COMPAT_1_0(ibv_query_qp)
int simhca_compat_1_0_query_qp(ibv_qp_1_0 *, ibv_qp_attr *, int, ibv_qp_init_attr *)
{
    return unsupported(EOPNOTSUPP);
}

COMPAT_1_0(ibv_modify_qp) int simhca_compat_1_0_modify_qp(ibv_qp_1_0 *, ibv_qp_attr *, int)
{
    return unsupported(EOPNOTSUPP);
}

COMPAT_1_0(ibv_destroy_qp) int simhca_compat_1_0_destroy_qp(ibv_qp_1_0 *)
{
    return unsupported(EOPNOTSUPP);
}

COMPAT_1_0(ibv_attach_mcast) int simhca_compat_1_0_attach_mcast(ibv_qp_1_0 *, ibv_gid *, uint16_t)
{
    return unsupported(EOPNOTSUPP);
}

COMPAT_1_0(ibv_detach_mcast) int simhca_compat_1_0_detach_mcast(ibv_qp_1_0 *, ibv_gid *, uint16_t)
{
    return unsupported(EOPNOTSUPP);
}

// --- AH -----------------------------------------------------------------------------------------------
COMPAT_1_0(ibv_create_ah) ibv_ah_1_0 *simhca_compat_1_0_create_ah(ibv_pd_1_0 *, ibv_ah_attr *)
{
    return unsupported<ibv_ah_1_0 *>(nullptr);
}

COMPAT_1_0(ibv_destroy_ah) int simhca_compat_1_0_destroy_ah(ibv_ah_1_0 *)
{
    return unsupported(EOPNOTSUPP);
}

// --- ibv_register_driver@IBVERBS_1.1 --------------------------------------------------------------------
// The pre-2017 provider registration (name + init function). rdma-core 44 keeps it only so that old
// out-of-tree providers still load; it ignores them, and so do we: the software HCA has no providers.
__attribute__((symver("ibv_register_driver@IBVERBS_1.1"), used))
void simhca_compat_1_1_register_driver(const char *, void *(*)(const char *, int)) {}

} // extern "C"
