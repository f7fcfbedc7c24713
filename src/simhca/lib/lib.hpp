// SPDX-License-Identifier: BSD-3-Clause
// Internal types of the software HCA's libibverbs.so.1. Every verbs object
// handed to the application is the public rdma-core struct embedded first in
// one of ours, so a plain cast recovers our state (like providers do).
#pragma once
#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <sys/types.h>
#include <unordered_map>
#include <unordered_set>

#include "../common/protocol.hpp"
#include "../common/shm_layout.hpp"

// The exported verbs are plain C functions; noexcept keeps C++ exceptions
// from ever unwinding into C callers.
#define SIMHCA_API extern "C"

namespace simhca::lib {

// One control connection per context (and a short-lived one for probing).
class Conn {
public:
    Conn() = default;
    Conn(const Conn &) = delete;
    Conn &operator=(const Conn &) = delete;
    ~Conn();
    int connect(); // 0 or errno
    // One round trip. in_fd (or -1) is attached to the request; received fds
    // are stored in out_fds. Returns 0 or an errno (transport or daemon).
    int call(proto::Op op, proto::Request &req, proto::Response &resp, int in_fd = -1, int *out_fds = nullptr,
             int max_out = 0) noexcept;
    int fd() const { return fd_; }
    // Remembered from Hello so that a fork()ed child can join (see call()).
    void set_identity(uint32_t client_id, uint64_t secret) {
        client_id_ = client_id;
        secret_ = secret;
    }

private:
    int rejoin() noexcept;
    int fd_ = -1;
    uint32_t client_id_ = 0;
    uint64_t secret_ = 0;
    pid_t pid_ = 0; // process that connected (a forked child may not reuse it)
    std::mutex mu_;
};

struct Context {
    verbs_context vctx; // vctx.context is what the application sees
    Conn conn;
    // ibv_import_device: the passed cmd_fd (the owner's control socket), kept open - and so the owner's
    // objects alive - until this context is closed; requests go over `conn`, our own connection.
    int imported_cmd_fd = -1;
    int doorbell = -1;
    const std::atomic<uint32_t> *daemon_awake = nullptr; // mapped read-only; nullptr: always ring
    uint16_t lid = 0;
    uint64_t node_guid = 0; // network order
    // Live CQs, SRQs and QP handles by daemon handle: event records name the
    // handle, and records of destroyed objects are skipped (the kernel drops
    // them from the event file on destroy).
    std::mutex reg_mu;
    std::unordered_map<uint32_t, void *> objs;
    std::unordered_set<const void *> parents; // parent domains (under reg_mu)
    void reg(uint32_t h, void *p) {
        std::lock_guard<std::mutex> g(reg_mu);
        objs[h] = p;
    }
    void unreg(uint32_t h) {
        std::lock_guard<std::mutex> g(reg_mu);
        objs.erase(h);
    }
    void *find(uint32_t h) {
        std::lock_guard<std::mutex> g(reg_mu);
        auto it = objs.find(h);
        return it == objs.end() ? nullptr : it->second;
    }
};

inline Context *ctx_of(ibv_context *c) {
    return reinterpret_cast<Context *>(reinterpret_cast<char *>(c) - offsetof(Context, vctx.context));
}

// Read-modify-write of a mapped region (CQ, SRQ, QP): unmapped by the owner.
struct Mapping {
    void *base = nullptr;
    size_t size = 0;
    int map(int fd, size_t len) noexcept; // takes ownership of fd (closes it)
    void unmap() noexcept;
};

struct Pd {
    ibv_pd pd;
};

// A parent domain is a second name for a real PD (pd.handle is the real
// one's), so every verb taking a PD accepts it unchanged. The context
// remembers which PDs are parent domains (Context::parents), rather than a
// field in the object: ibv_dealloc_pd must not trust memory behind a
// pointer it did not create.

struct Mr {
    ibv_mr mr;
};

struct Channel {
    ibv_comp_channel ch;
    uint32_t handle;
};

struct Cq {
    ibv_cq_ex cq; // superset of ibv_cq, so both APIs work on one object
    Mapping map;
    shm::CqCtl *ctl = nullptr;
    shm::Cqe *ring = nullptr;
    uint32_t entries = 0;
    uint32_t tail = 0;
    const shm::Cqe *cur = nullptr; // extended polling cursor
    uint32_t empty_polls = 0;
    uint32_t comp_reported = 0, async_reported = 0; // events read by the app (under cq.mutex)
    std::mutex mu;
};

struct Xrcd {
    ibv_xrcd xrcd;
    uint32_t handle;
};

struct Srq {
    ibv_srq srq;
    uint32_t srqn = 0;
    Mapping map;
    shm::SrqCtl *ctl = nullptr;
    shm::RecvWqe *ring = nullptr;
    uint32_t entries = 0, max_sge = 0;
    std::mutex mu;
    uint32_t events_reported = 0; // under srq.mutex
};

struct Qp {
    ibv_qp_ex qpx; // qpx.qp_base is the ibv_qp the application sees
    Mapping map;
    shm::QpCtl *ctl = nullptr;
    shm::SendWqe *sq = nullptr;
    shm::RecvWqe *rq = nullptr;
    uint32_t sq_entries = 0, rq_entries = 0;
    ibv_qp_cap cap{};
    std::mutex sq_mu, rq_mu;
    // ibv_qp_ex builder state (ibv_wr_start .. ibv_wr_complete)
    uint32_t wr_head = 0;
    int wr_err = 0;
    shm::SendWqe *wr_cur = nullptr;
    uint32_t events_reported = 0; // under qp.mutex
};

inline Qp *qp_of(ibv_qp *q) { return reinterpret_cast<Qp *>(q); }

struct Ah {
    ibv_ah ah;
    ibv_ah_attr attr;
};

// Sets errno and returns nullptr: the common failure shape of create verbs.
template <class T> T *fail(int err) {
    errno = err;
    return nullptr;
}

// The one device (probed on first use), or nullptr when no daemon answers.
ibv_device *the_device() noexcept;
// Fills a context from Hello's (or ImportDevice's) answer: identity, async fd, doorbell, awake word, ops.
void init_context(Context &c, ibv_device *device, const proto::HelloResp &hello, const int fds[3]) noexcept;
// A new context on its own daemon connection, introduced with `op`: Hello (a new client) or ImportDevice
// (joins the client whose socket `pass_fd` is). Null with errno set on failure.
ibv_context *connect_context(ibv_device *device, proto::Op op, int pass_fd) noexcept;

void ring_doorbell(Context &c) noexcept;
// After publishing a send queue's producer index: rings only when the daemon may be asleep.
void ring_doorbell_sq(Context &c) noexcept;
void init_qp_ex_ops(Qp &qp) noexcept; // qp_ex.cpp
void init_cq_ex_ops(Cq &cq) noexcept; // cq_ex.cpp
void wc_from_cqe(ibv_wc &wc, const shm::Cqe &e) noexcept;
void clean_cq(ibv_cq *cq, uint32_t qpn) noexcept;

// Entry points installed in the context (context.cpp wires them up).
int post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **bad) noexcept;
int post_recv(ibv_qp *qp, ibv_recv_wr *wr, ibv_recv_wr **bad) noexcept;
int post_srq_recv(ibv_srq *srq, ibv_recv_wr *wr, ibv_recv_wr **bad) noexcept;
int poll_cq(ibv_cq *cq, int n, ibv_wc *wc) noexcept;
int req_notify_cq(ibv_cq *cq, int solicited_only) noexcept;
int query_port_ex(ibv_context *c, uint8_t port, ibv_port_attr *attr, size_t len) noexcept;
int query_device_ex(ibv_context *c, const ibv_query_device_ex_input *in, ibv_device_attr_ex *attr,
                    size_t len) noexcept;
ibv_cq_ex *create_cq_ex(ibv_context *c, ibv_cq_init_attr_ex *attr) noexcept;
ibv_xrcd *open_xrcd(ibv_context *c, ibv_xrcd_init_attr *attr) noexcept;
int close_xrcd(ibv_xrcd *x) noexcept;
ibv_srq *create_srq_ex(ibv_context *c, ibv_srq_init_attr_ex *attr) noexcept;
int get_srq_num(ibv_srq *srq, uint32_t *num) noexcept;
int post_srq_ops(ibv_srq *srq, ibv_ops_wr *wr, ibv_ops_wr **bad) noexcept; // srq_tm.cpp
ibv_qp *create_qp_ex(ibv_context *c, ibv_qp_init_attr_ex *attr) noexcept;
ibv_qp *open_qp(ibv_context *c, ibv_qp_open_attr *attr) noexcept;
int advise_mr(ibv_pd *pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge *sg, uint32_t n) noexcept;
ibv_mw *alloc_mw(ibv_pd *pd, ibv_mw_type type) noexcept;
ibv_dm *alloc_dm(ibv_context *c, ibv_alloc_dm_attr *attr) noexcept;
int free_dm(ibv_dm *dm) noexcept;
ibv_mr *reg_dm_mr(ibv_pd *pd, ibv_dm *dm, uint64_t offset, size_t length, unsigned int access) noexcept;
ibv_td *alloc_td(ibv_context *c, ibv_td_init_attr *attr) noexcept;
int dealloc_td(ibv_td *td) noexcept;
ibv_pd *alloc_parent_domain(ibv_context *c, ibv_parent_domain_init_attr *attr) noexcept;
int dealloc_mw(ibv_mw *mw) noexcept;
int bind_mw(ibv_qp *qp, ibv_mw *mw, ibv_mw_bind *bind) noexcept;

} // namespace simhca::lib
