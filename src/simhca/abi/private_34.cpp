// SPDX-License-Identifier: BSD-3-Clause
// The driver-facing ABI, IBVERBS_PRIVATE_34: what rdma-core's providers (libmlx5, librxe, ... from
// Debian's ibverbs-providers) import from libibverbs.
//
// Why it must exist: the providers are linked BIND_NOW against these symbols, and pyverbs' provider modules
// (pyverbs.providers.mlx5, efa) link libmlx5/libefa; so merely importing them, or a program that dlopens a
// provider, needs every one of these to resolve. Why it may only fail: the software HCA never loads a
// provider (its one device is served by the library itself), so none of these is reachable with a device
// of ours. A provider's constructor calls verbs_register_driver_34 at load time, so that one is a harmless
// no-op; the ibv_cmd_* kernel-command wrappers fail with the errno a kernel without the command gives
// (EOPNOTSUPP), using each one's convention (an errno value, or -1 with errno).
//
// rdma-core's driver.h is not shipped by Debian; argument types are forward-declared here. Only the
// symbol names and return types are ABI; the argument lists follow rdma-core 44's driver.h.
// Exported whatever -fvisibility the library is built with: the version script alone decides what is
// local (abi/libibverbs.map).
#pragma GCC visibility push(default)

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <pthread.h>

struct verbs_device_ops;
struct verbs_context_ops;
struct verbs_sysfs_dev;
struct verbs_xrcd;
struct verbs_mr;
struct verbs_cq;
struct verbs_srq;
struct verbs_qp;
struct verbs_dm;
struct verbs_counters;
struct verbs_flow_action;
struct ibv_command_buffer;
struct ibv_flow_action_esp_attr;
struct ibv_query_device_ex_input;

namespace {

int unsupported_errno()
{
    errno = EOPNOTSUPP;
    return EOPNOTSUPP;
}

} // namespace

// The stubs below all fail the same way; the macro keeps each one to its signature.
#define CMD_UNSUPPORTED(name, ...)                                                                         \
    int name(__VA_ARGS__) { return unsupported_errno(); }

extern "C" {

// rdma-core flag a provider may set; read by nothing here, exported because providers reference it.
bool verbs_allow_disassociate_destroy;

// --- provider registration and context set-up ----------------------------------------------------------
void verbs_register_driver_34(const verbs_device_ops *) {}

void *_verbs_init_and_alloc_context(struct ibv_device *, int, size_t, struct verbs_context *, uint32_t)
{
    errno = EOPNOTSUPP;
    return nullptr;
}

void verbs_uninit_context(struct verbs_context *) {}

void verbs_set_ops(struct verbs_context *, const verbs_context_ops *) {}

struct ibv_context *verbs_open_device(struct ibv_device *, void *)
{
    errno = EOPNOTSUPP;
    return nullptr;
}

// Fills the generic part of a CQ a provider allocated; only public ibv_cq fields, so it is implemented for
// real (it is the one helper here a provider could use without the kernel).
void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context, struct ibv_comp_channel *channel,
                   void *cq_context)
{
    cq->context = context;
    cq->channel = channel;
    if (channel) {
        pthread_mutex_lock(&context->mutex);
        ++channel->refcnt;
        pthread_mutex_unlock(&context->mutex);
    }
    cq->cq_context = cq_context;
    cq->comp_events_completed = 0;
    cq->async_events_completed = 0;
    pthread_mutex_init(&cq->mutex, nullptr);
    pthread_cond_init(&cq->cond, nullptr);
}

// rdma-core's provider logging (to $VERBS_LOG_FILE at $VERBS_LOG_LEVEL); no provider runs here.
void __verbs_log(struct verbs_context *, const char *, ...) {}

// --- the ioctl command path ----------------------------------------------------------------------------
int execute_ioctl(struct ibv_context *, ibv_command_buffer *)
{
    return unsupported_errno();
}

// Sizes a command buffer on the caller's stack; never followed by a successful execute_ioctl here.
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, ibv_command_buffer *)
{
    return num_attrs;
}

// --- sysfs and GID helpers -----------------------------------------------------------------------------
int ibv_read_ibdev_sysfs_file(char *, size_t, verbs_sysfs_dev *, const char *, ...)
{
    errno = EOPNOTSUPP;
    return -1;
}

// GID type 0 (IBV_GID_TYPE_SYSFS_IB_ROCE_V1) is what an InfiniBand port reports for every GID.
int ibv_query_gid_type(struct ibv_context *, uint8_t, unsigned int, int *type)
{
    *type = 0;
    return 0;
}

// --- kernel command wrappers (write and ioctl paths): every one fails ---------------------------------
CMD_UNSUPPORTED(ibv_cmd_get_context, struct verbs_context *, void *, size_t, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_query_context, struct ibv_context *, ibv_command_buffer *)
CMD_UNSUPPORTED(ibv_cmd_query_device_any, struct ibv_context *, const ibv_query_device_ex_input *,
                struct ibv_device_attr_ex *, size_t, void *, size_t *)
CMD_UNSUPPORTED(ibv_cmd_query_port, struct ibv_context *, uint8_t, struct ibv_port_attr *, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_alloc_pd, struct ibv_context *, struct ibv_pd *, void *, size_t, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_dealloc_pd, struct ibv_pd *)
CMD_UNSUPPORTED(ibv_cmd_open_xrcd, struct ibv_context *, verbs_xrcd *, int, struct ibv_xrcd_init_attr *,
                void *, size_t, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_close_xrcd, verbs_xrcd *)
CMD_UNSUPPORTED(ibv_cmd_reg_mr, struct ibv_pd *, void *, size_t, uint64_t, int, verbs_mr *, void *, size_t,
                void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_rereg_mr, verbs_mr *, uint32_t, void *, size_t, uint64_t, int, struct ibv_pd *,
                void *, size_t, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_dereg_mr, verbs_mr *)
CMD_UNSUPPORTED(ibv_cmd_query_mr, struct ibv_pd *, verbs_mr *, uint32_t)
CMD_UNSUPPORTED(ibv_cmd_advise_mr, struct ibv_pd *, enum ibv_advise_mr_advice, uint32_t, struct ibv_sge *,
                uint32_t)
CMD_UNSUPPORTED(ibv_cmd_reg_dmabuf_mr, struct ibv_pd *, uint64_t, size_t, uint64_t, int, int, verbs_mr *)
CMD_UNSUPPORTED(ibv_cmd_reg_dm_mr, struct ibv_pd *, verbs_dm *, uint64_t, size_t, unsigned int, verbs_mr *,
                ibv_command_buffer *)
CMD_UNSUPPORTED(ibv_cmd_alloc_mw, struct ibv_pd *, enum ibv_mw_type, struct ibv_mw *, void *, size_t, void *,
                size_t)
CMD_UNSUPPORTED(ibv_cmd_dealloc_mw, struct ibv_mw *)
CMD_UNSUPPORTED(ibv_cmd_alloc_dm, struct ibv_context *, const struct ibv_alloc_dm_attr *, verbs_dm *,
                ibv_command_buffer *)
CMD_UNSUPPORTED(ibv_cmd_free_dm, verbs_dm *)
CMD_UNSUPPORTED(ibv_cmd_create_cq, struct ibv_context *, int, struct ibv_comp_channel *, int, struct ibv_cq *,
                void *, size_t, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_create_cq_ex, struct ibv_context *, const struct ibv_cq_init_attr_ex *, verbs_cq *,
                void *, size_t, void *, size_t, uint32_t)
// rdma-core 56 (libmlx5 56 imports it; the argument list is that release's driver.h).
CMD_UNSUPPORTED(ibv_cmd_create_cq_ex2, struct ibv_context *, const struct ibv_cq_init_attr_ex *, verbs_cq *,
                void *, size_t, void *, size_t, uint32_t, ibv_command_buffer *)
CMD_UNSUPPORTED(ibv_cmd_req_notify_cq, struct ibv_cq *, int)
CMD_UNSUPPORTED(ibv_cmd_resize_cq, struct ibv_cq *, int, void *, size_t, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_destroy_cq, struct ibv_cq *)
CMD_UNSUPPORTED(ibv_cmd_modify_cq, struct ibv_cq *, struct ibv_modify_cq_attr *, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_create_srq, struct ibv_pd *, struct ibv_srq *, struct ibv_srq_init_attr *, void *,
                size_t, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_create_srq_ex, struct ibv_context *, verbs_srq *, struct ibv_srq_init_attr_ex *,
                void *, size_t, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_modify_srq, struct ibv_srq *, struct ibv_srq_attr *, int, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_query_srq, struct ibv_srq *, struct ibv_srq_attr *, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_destroy_srq, struct ibv_srq *)
CMD_UNSUPPORTED(ibv_cmd_create_qp, struct ibv_pd *, struct ibv_qp *, struct ibv_qp_init_attr *, void *, size_t,
                void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_create_qp_ex, struct ibv_context *, verbs_qp *, struct ibv_qp_init_attr_ex *, void *,
                size_t, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_create_qp_ex2, struct ibv_context *, verbs_qp *, struct ibv_qp_init_attr_ex *, void *,
                size_t, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_open_qp, struct ibv_context *, verbs_qp *, int, struct ibv_qp_open_attr *, void *,
                size_t, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_query_qp, struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *,
                void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_modify_qp, struct ibv_qp *, struct ibv_qp_attr *, int, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_modify_qp_ex, struct ibv_qp *, struct ibv_qp_attr *, int, void *, size_t, void *,
                size_t)
CMD_UNSUPPORTED(ibv_cmd_destroy_qp, struct ibv_qp *)
CMD_UNSUPPORTED(ibv_cmd_create_ah, struct ibv_pd *, struct ibv_ah *, struct ibv_ah_attr *, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_destroy_ah, struct ibv_ah *)
CMD_UNSUPPORTED(ibv_cmd_attach_mcast, struct ibv_qp *, const union ibv_gid *, uint16_t)
CMD_UNSUPPORTED(ibv_cmd_detach_mcast, struct ibv_qp *, const union ibv_gid *, uint16_t)
CMD_UNSUPPORTED(ibv_cmd_create_flow, struct ibv_qp *, struct ibv_flow *, struct ibv_flow_attr *, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_destroy_flow, struct ibv_flow *)
CMD_UNSUPPORTED(ibv_cmd_create_flow_action_esp, struct ibv_context *, ibv_flow_action_esp_attr *,
                verbs_flow_action *, ibv_command_buffer *)
CMD_UNSUPPORTED(ibv_cmd_modify_flow_action_esp, verbs_flow_action *, ibv_flow_action_esp_attr *,
                ibv_command_buffer *)
CMD_UNSUPPORTED(ibv_cmd_destroy_flow_action, verbs_flow_action *)
CMD_UNSUPPORTED(ibv_cmd_create_wq, struct ibv_context *, struct ibv_wq_init_attr *, struct ibv_wq *, void *,
                size_t, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_modify_wq, struct ibv_wq *, struct ibv_wq_attr *, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_destroy_wq, struct ibv_wq *)
CMD_UNSUPPORTED(ibv_cmd_create_rwq_ind_table, struct ibv_context *, struct ibv_rwq_ind_table_init_attr *,
                struct ibv_rwq_ind_table *, void *, size_t)
CMD_UNSUPPORTED(ibv_cmd_destroy_rwq_ind_table, struct ibv_rwq_ind_table *)
CMD_UNSUPPORTED(ibv_cmd_create_counters, struct ibv_context *, struct ibv_counters_init_attr *,
                verbs_counters *, ibv_command_buffer *)
CMD_UNSUPPORTED(ibv_cmd_destroy_counters, verbs_counters *)
CMD_UNSUPPORTED(ibv_cmd_read_counters, verbs_counters *, uint64_t *, uint32_t, uint32_t, ibv_command_buffer *)

// The data-path commands keep their callers' conventions: poll returns -1 (a count otherwise), the post
// calls name the first work request that failed.
int ibv_cmd_poll_cq(struct ibv_cq *, int, struct ibv_wc *)
{
    errno = EOPNOTSUPP;
    return -1;
}

int ibv_cmd_post_send(struct ibv_qp *, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
    if (bad_wr)
        *bad_wr = wr;
    return unsupported_errno();
}

int ibv_cmd_post_recv(struct ibv_qp *, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
    if (bad_wr)
        *bad_wr = wr;
    return unsupported_errno();
}

int ibv_cmd_post_srq_recv(struct ibv_srq *, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
    if (bad_wr)
        *bad_wr = wr;
    return unsupported_errno();
}

} // extern "C"
