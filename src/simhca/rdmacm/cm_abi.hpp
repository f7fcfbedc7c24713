// SPDX-License-Identifier: BSD-3-Clause
// The ABI of rdma-core 44's librdmacm.so.1 (Debian 12): structures, enums and constants exactly as programs
// compiled against <rdma/rdma_cma.h> lay them out. librdmacm-dev is not a build dependency, so this file
// states the layout itself (member order and types are the ABI; static_asserts below pin the sizes that
// pyverbs' cmid module was compiled with). Only what the library needs is declared.
#pragma once

#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

extern "C" {

enum rdma_cm_event_type {
    RDMA_CM_EVENT_ADDR_RESOLVED,
    RDMA_CM_EVENT_ADDR_ERROR,
    RDMA_CM_EVENT_ROUTE_RESOLVED,
    RDMA_CM_EVENT_ROUTE_ERROR,
    RDMA_CM_EVENT_CONNECT_REQUEST,
    RDMA_CM_EVENT_CONNECT_RESPONSE,
    RDMA_CM_EVENT_CONNECT_ERROR,
    RDMA_CM_EVENT_UNREACHABLE,
    RDMA_CM_EVENT_REJECTED,
    RDMA_CM_EVENT_ESTABLISHED,
    RDMA_CM_EVENT_DISCONNECTED,
    RDMA_CM_EVENT_DEVICE_REMOVAL,
    RDMA_CM_EVENT_MULTICAST_JOIN,
    RDMA_CM_EVENT_MULTICAST_ERROR,
    RDMA_CM_EVENT_ADDR_CHANGE,
    RDMA_CM_EVENT_TIMEWAIT_EXIT
};

enum rdma_port_space {
    RDMA_PS_IPOIB = 0x0002,
    RDMA_PS_TCP = 0x0106,
    RDMA_PS_UDP = 0x0111,
    RDMA_PS_IB = 0x013F,
};

// Q_Key of every UDP-port-space QP and multicast group the CM sets up.
constexpr uint32_t RDMA_UDP_QKEY = 0x01234567;
// IPoIB's Q_Key (the IPOIB port space uses it).
constexpr uint32_t RDMA_IPOIB_QKEY = 0x80010000;

struct rdma_ib_addr {
    union ibv_gid sgid;
    union ibv_gid dgid;
    __be16 pkey;
};

struct rdma_addr {
    union {
        struct sockaddr src_addr;
        struct sockaddr_in src_sin;
        struct sockaddr_in6 src_sin6;
        struct sockaddr_storage src_storage;
    };
    union {
        struct sockaddr dst_addr;
        struct sockaddr_in dst_sin;
        struct sockaddr_in6 dst_sin6;
        struct sockaddr_storage dst_storage;
    };
    union {
        struct rdma_ib_addr ibaddr;
    } addr;
};

struct rdma_route {
    struct rdma_addr addr;
    struct ibv_sa_path_rec *path_rec;
    int num_paths;
};

struct rdma_event_channel {
    int fd;
};

struct rdma_cm_event;

struct rdma_cm_id {
    struct ibv_context *verbs;
    struct rdma_event_channel *channel;
    void *context;
    struct ibv_qp *qp;
    struct rdma_route route;
    enum rdma_port_space ps;
    uint8_t port_num;
    struct rdma_cm_event *event;
    struct ibv_comp_channel *send_cq_channel;
    struct ibv_cq *send_cq;
    struct ibv_comp_channel *recv_cq_channel;
    struct ibv_cq *recv_cq;
    struct ibv_srq *srq;
    struct ibv_pd *pd;
    enum ibv_qp_type qp_type;
};

struct rdma_conn_param {
    const void *private_data;
    uint8_t private_data_len;
    uint8_t responder_resources;
    uint8_t initiator_depth;
    uint8_t flow_control;
    uint8_t retry_count;
    uint8_t rnr_retry_count;
    uint8_t srq;
    uint32_t qp_num;
};

struct rdma_ud_param {
    const void *private_data;
    uint8_t private_data_len;
    struct ibv_ah_attr ah_attr;
    uint32_t qp_num;
    uint32_t qkey;
};

struct rdma_cm_event {
    struct rdma_cm_id *id;
    struct rdma_cm_id *listen_id;
    enum rdma_cm_event_type event;
    int status;
    union {
        struct rdma_conn_param conn;
        struct rdma_ud_param ud;
    } param;
};

constexpr int RAI_PASSIVE = 0x1;
constexpr int RAI_NUMERICHOST = 0x2;
constexpr int RAI_NOROUTE = 0x4;
constexpr int RAI_FAMILY = 0x8;

struct rdma_addrinfo {
    int ai_flags;
    int ai_family;
    int ai_qp_type;
    int ai_port_space;
    socklen_t ai_src_len;
    socklen_t ai_dst_len;
    struct sockaddr *ai_src_addr;
    struct sockaddr *ai_dst_addr;
    char *ai_src_canonname;
    char *ai_dst_canonname;
    size_t ai_route_len;
    void *ai_route;
    size_t ai_connect_len;
    void *ai_connect;
    struct rdma_addrinfo *ai_next;
};

enum { RDMA_CM_JOIN_MC_ATTR_ADDRESS = 1 << 0, RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS = 1 << 1, RDMA_CM_JOIN_MC_ATTR_RESERVED = 1 << 2 };
enum { RDMA_MC_JOIN_FLAG_FULLMEMBER, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, RDMA_MC_JOIN_FLAG_RESERVED };

struct rdma_cm_join_mc_attr_ex {
    uint32_t comp_mask;
    uint32_t join_flags;
    struct sockaddr *addr;
};

// rdma_set_option levels and names.
enum { RDMA_OPTION_ID = 0, RDMA_OPTION_IB = 1 };
enum { RDMA_OPTION_ID_TOS = 0, RDMA_OPTION_ID_REUSEADDR = 1, RDMA_OPTION_ID_AFONLY = 2, RDMA_OPTION_ID_ACK_TIMEOUT = 3 };
enum { RDMA_OPTION_IB_PATH = 1 };

// The public functions (rdma_cma.h, rdma_verbs.h), declared here so that every definition is checked
// against its C signature.
rdma_event_channel *rdma_create_event_channel(void);
void rdma_destroy_event_channel(rdma_event_channel *channel);
int rdma_create_id(rdma_event_channel *channel, rdma_cm_id **id, void *context, enum rdma_port_space ps);
int rdma_create_ep(rdma_cm_id **id, rdma_addrinfo *res, ibv_pd *pd, ibv_qp_init_attr *qp_init_attr);
void rdma_destroy_ep(rdma_cm_id *id);
int rdma_destroy_id(rdma_cm_id *id);
int rdma_bind_addr(rdma_cm_id *id, sockaddr *addr);
int rdma_resolve_addr(rdma_cm_id *id, sockaddr *src_addr, sockaddr *dst_addr, int timeout_ms);
int rdma_resolve_route(rdma_cm_id *id, int timeout_ms);
int rdma_create_qp(rdma_cm_id *id, ibv_pd *pd, ibv_qp_init_attr *qp_init_attr);
int rdma_create_qp_ex(rdma_cm_id *id, ibv_qp_init_attr_ex *qp_init_attr);
void rdma_destroy_qp(rdma_cm_id *id);
int rdma_create_srq(rdma_cm_id *id, ibv_pd *pd, ibv_srq_init_attr *attr);
int rdma_create_srq_ex(rdma_cm_id *id, ibv_srq_init_attr_ex *attr);
void rdma_destroy_srq(rdma_cm_id *id);
int rdma_connect(rdma_cm_id *id, rdma_conn_param *conn_param);
int rdma_establish(rdma_cm_id *id);
int rdma_listen(rdma_cm_id *id, int backlog);
int rdma_get_request(rdma_cm_id *listen, rdma_cm_id **id);
int rdma_accept(rdma_cm_id *id, rdma_conn_param *conn_param);
int rdma_reject(rdma_cm_id *id, const void *private_data, uint8_t private_data_len);
int rdma_reject_ece(rdma_cm_id *id, const void *private_data, uint8_t private_data_len);
int rdma_notify(rdma_cm_id *id, enum ibv_event_type event);
int rdma_disconnect(rdma_cm_id *id);
int rdma_join_multicast(rdma_cm_id *id, sockaddr *addr, void *context);
int rdma_join_multicast_ex(rdma_cm_id *id, rdma_cm_join_mc_attr_ex *mc_join_attr, void *context);
int rdma_leave_multicast(rdma_cm_id *id, sockaddr *addr);
int rdma_get_cm_event(rdma_event_channel *channel, rdma_cm_event **event);
int rdma_ack_cm_event(rdma_cm_event *event);
__be16 rdma_get_src_port(rdma_cm_id *id);
__be16 rdma_get_dst_port(rdma_cm_id *id);
ibv_context **rdma_get_devices(int *num_devices);
void rdma_free_devices(ibv_context **list);
const char *rdma_event_str(enum rdma_cm_event_type event);
int rdma_set_option(rdma_cm_id *id, int level, int optname, void *optval, size_t optlen);
int rdma_migrate_id(rdma_cm_id *id, rdma_event_channel *channel);
int rdma_getaddrinfo(const char *node, const char *service, const rdma_addrinfo *hints, rdma_addrinfo **res);
void rdma_freeaddrinfo(rdma_addrinfo *res);
int rdma_init_qp_attr(rdma_cm_id *id, ibv_qp_attr *qp_attr, int *qp_attr_mask);
int rdma_set_local_ece(rdma_cm_id *id, ibv_ece *ece);
int rdma_get_remote_ece(rdma_cm_id *id, ibv_ece *ece);

}  // extern "C"

// Sizes of the structures programs allocate or embed (x86_64): a change here would break every caller.
static_assert(sizeof(rdma_addr) == 296);
static_assert(sizeof(rdma_cm_event) == 80);
static_assert(sizeof(rdma_conn_param) == 24);
static_assert(sizeof(rdma_addrinfo) == 96);
