// SPDX-License-Identifier: BSD-3-Clause
// Control protocol between libibverbs (and simhca-ctl) and simhcad.
// Transport: SOCK_SEQPACKET on the abstract UNIX socket "@simhca[.<instance>]".
// One request datagram -> one reply datagram (plus fds via SCM_RIGHTS).
// Only control verbs use it; the data path goes through shared memory.
// The structs are copied raw: both ends run on the same machine and ABI.
#pragma once
#include <cstdint>
#include <infiniband/verbs.h>

namespace simhca::proto {

constexpr uint32_t kMagic = 0x53494d48; // "SIMH"
constexpr uint32_t kVersion = 1;

enum class Op : uint32_t {
    Hello = 1,
    QueryPort,
    AllocPd,
    DeallocPd,
    RegMr,
    DeregMr,
    CreateChannel,
    DestroyChannel,
    CreateCq,
    DestroyCq,
    CreateSrq,
    ModifySrq,
    QuerySrq,
    DestroySrq,
    OpenXrcd,
    CloseXrcd,
    CreateQp,
    OpenQp,
    ModifyQp,
    QueryQp,
    DestroyQp,
    Status,
    ListObjects,
    Fault,
    Kick,  // re-scan this client's queues (used after post on an errored QP)
    Probe, // device identity without creating a context (ibv_get_device_list)
    ReregMr,
    ResizeCq,
    AllocMw,
    DeallocMw,
    AllocDm,
    FreeDm,
    RegDmMr,
    Join, // a forked child's own connection acting for its parent's context
    AttachMcast,
    DetachMcast,
    // Object import (ibv_import_device / _pd / _mr / _dm): a new connection joins the context whose
    // socket it passes with SCM_RIGHTS; the others look up an object of that context by handle.
    ImportDevice,
    ImportPd,
    ImportMr,
    ImportDm,
    TmOp, // ibv_post_srq_ops: one tag list operation on a TM SRQ
};

struct HelloReq {
    uint32_t magic, version;
};
struct HelloResp {
    uint16_t lid;
    uint16_t pad;
    uint32_t port_state; // enum ibv_port_state
    uint64_t node_guid;  // network order
    char node_name[64];
    char sysfs_dir[256];
    uint32_t client_id; // with `secret`: lets a fork()ed child join this context (Op::Join)
    uint32_t pad2;
    uint64_t secret;
    // fds: [0] async event pipe (read end), [1] doorbell eventfd
};

struct JoinReq {
    uint32_t client_id;
    uint32_t pad;
    uint64_t secret;
};

// ImportDevice answers with HelloResp and Hello's fds; ImportPd with nothing.
struct ImportMrResp {
    uint32_t handle, lkey, rkey;
    uint32_t pad;
    uint64_t length;
};
struct ImportDmResp {
    uint32_t handle;
    uint32_t pad;
    uint64_t length;
    // fds: [0] memfd of the device memory
};

struct PortResp {
    uint32_t state;
    uint16_t lid;
    uint16_t sm_lid;
};

struct HandleReq {
    uint32_t handle;
};

struct RegMrReq {
    uint32_t pd;
    int32_t access;
    uint64_t addr;
    uint64_t length;
    uint64_t iova;
};
struct ReregMrReq {
    uint32_t handle;
    int32_t flags; // enum ibv_rereg_mr_flags
    uint32_t pd;
    int32_t access;
    uint64_t addr, length, iova;
};
struct AllocDmReq {
    uint64_t length;
    uint32_t log_align;
    uint32_t pad;
};
struct RegDmMrReq {
    uint32_t pd, dm;
    int32_t access;
    uint32_t pad;
    uint64_t offset, length;
};
struct AllocMwReq {
    uint32_t pd;
    uint32_t type; // enum ibv_mw_type
};
struct ResizeCqReq {
    uint32_t handle;
    int32_t cqe;
};
struct RegMrResp {
    uint32_t handle, lkey, rkey;
};

struct CreateCqReq {
    int32_t cqe;
    uint32_t channel; // 0 = none
    uint64_t cookie;  // library's struct ibv_cq *, echoed in events
};
struct CreateCqResp {
    uint32_t handle;
    uint32_t entries; // ring size (power of two)
    // fds: [0] memfd of the CQ region
};

struct CreateSrqReq {
    uint32_t type; // enum ibv_srq_type
    uint32_t pd;
    uint32_t xrcd; // for XRC
    uint32_t cq;   // for XRC
    uint32_t max_wr, max_sge, srq_limit;
    uint32_t pad;
    uint64_t cookie;
    uint32_t tm_max_num_tags, tm_max_ops; // IBV_SRQT_TM (ibv_tm_cap)
};

// One ibv_ops_wr. The reply carries the handle of an added tag in `h.handle`.
struct TmOpReq {
    uint32_t srq;            // SRQ handle
    uint32_t opcode;         // enum ibv_ops_wr_opcode
    uint32_t flags;          // enum ibv_ops_flags
    uint32_t unexpected_cnt; // the application's count of unexpected messages
    uint32_t handle;         // TAG_DEL
    uint32_t num_sge;        // TAG_ADD
    uint64_t wr_id, recv_wr_id, tag, mask;
    ibv_sge sge[1]; // limits::kTmMaxSge
};
struct CreateSrqResp {
    uint32_t handle, srqn, entries, max_sge;
    // fds: [0] memfd
};

struct ModifySrqReq {
    uint32_t handle;
    int32_t mask;
    ibv_srq_attr attr;
};
struct SrqAttrResp {
    ibv_srq_attr attr;
};

struct OpenXrcdReq {
    int32_t oflags;
    int32_t has_fd; // fd passed with SCM_RIGHTS when set
};
struct OpenXrcdResp {
    uint32_t handle;
};

struct CreateQpReq {
    uint32_t type; // enum ibv_qp_type
    uint32_t pd, send_cq, recv_cq, srq, xrcd;
    uint32_t sq_sig_all;
    ibv_qp_cap cap;
    uint64_t cookie;
};
struct CreateQpResp {
    uint32_t handle, qpn;
    uint32_t sq_entries, rq_entries;
    ibv_qp_cap cap;
    // fds: [0] memfd (absent for XRC_RECV)
};

struct OpenQpReq {
    uint32_t qpn, xrcd;
    uint32_t type;
    uint32_t pad;
    uint64_t cookie;
};

struct ModifyQpReq {
    uint32_t handle;
    int32_t mask;
    ibv_qp_attr attr;
};

struct QueryQpResp {
    ibv_qp_attr attr;
    ibv_qp_cap cap;
    uint32_t sq_sig_all;
};

struct DestroyResp {
    uint32_t events_reported;     // completion events (CQ) or async events
    uint32_t async_events_reported;
};

struct McastReq {
    uint32_t qp;     // QP handle
    uint16_t lid;    // multicast LID
    uint8_t gid[16]; // multicast GID (raw)
};
struct FaultReq {
    char what[64]; // "port-down", "port-up", "drop", "restore", "delay", "undelay", "stop"
    char arg[64];  // node name
    uint32_t ms;   // "delay": milliseconds
};

struct StatusResp {
    char text[3800]; // human or JSON text
};

struct ListReq {
    int32_t json;
};
// The status text's third line: the port counters, as "PREFIX NAME VALUE NAME VALUE ..." (simhca-ctl counters
// prints them one per line).
inline constexpr const char kCountersLinePrefix[] = "port 1 counters:";

// Everything in one fixed-size envelope keeps parsing trivial and bounded.
struct Request {
    uint32_t op;
    uint32_t pad;
    union {
        HelloReq hello;
        HandleReq h;
        RegMrReq reg_mr;
        ReregMrReq rereg_mr;
        ResizeCqReq resize_cq;
        AllocMwReq alloc_mw;
        AllocDmReq alloc_dm;
        JoinReq join;
        RegDmMrReq reg_dm_mr;
        CreateCqReq create_cq;
        CreateSrqReq create_srq;
        TmOpReq tm_op;
        ModifySrqReq modify_srq;
        OpenXrcdReq open_xrcd;
        CreateQpReq create_qp;
        OpenQpReq open_qp;
        ModifyQpReq modify_qp;
        FaultReq fault;
        McastReq mcast;
        ListReq list;
        uint8_t raw[512];
    };
};

struct Response {
    int32_t err; // 0 or a positive errno
    uint32_t pad;
    union {
        HelloResp hello;
        PortResp port;
        HandleReq h;
        RegMrResp reg_mr;
        ImportMrResp import_mr;
        ImportDmResp import_dm;
        CreateCqResp create_cq;
        CreateSrqResp create_srq;
        SrqAttrResp srq_attr;
        OpenXrcdResp open_xrcd;
        CreateQpResp create_qp;
        QueryQpResp query_qp;
        DestroyResp destroyed;
        StatusResp status;
        uint8_t raw[3800];
    };
};

// Records written by the daemon into the per-context async pipe.
struct AsyncRecord {
    uint32_t event_type; // enum ibv_event_type
    uint32_t port_num;
    uint64_t cookie; // daemon handle of the QP handle / CQ / SRQ, or 0
};

// Records written into a completion channel pipe.
struct CompRecord {
    uint64_t cq_cookie; // daemon handle of the CQ
};

} // namespace simhca::proto
