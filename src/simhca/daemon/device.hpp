// The simulated adapter: object tables, control verbs and the data path.
// Single-threaded: the server's epoll loop calls into it, so no locking.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <sys/uio.h>
#include <vector>

#include "../common/protocol.hpp"
#include "objects.hpp"
#include "parallel_copy.hpp"
#include "sysfs.hpp"

namespace simhca {

struct DeviceConfig {
    std::string node = "node0";
    uint16_t lid = 1;
    std::string sysfs_dir;
};

// Outcome of a request at the responder (what a real HCA would signal with
// ACK / NAK codes, or by dropping the packet).
enum class RespStatus { Ack, RnrNak, Drop, RemAccess, RemInvReq, RemOp, Discard /* out of sequence */ };

// One "packet" from requester to responder.
struct Message {
    uint32_t opcode; // ibv_wr_opcode
    uint32_t src_qpn, dst_qpn;
    uint16_t src_lid;
    uint16_t dlid; // UD: the destination LID (a multicast LID selects the group)
    uint32_t srqn;
    uint64_t remote_addr;
    uint32_t rkey;
    uint32_t imm;
    bool has_imm, solicited;
    bool has_inv; // SEND_WITH_INV: `imm` is the rkey to invalidate at the responder
    uint64_t compare_add, swap;
    uint32_t length; // RDMA READ / atomic size
    uint32_t qkey;
    uint64_t stream, seq; // requester epoch + sequence (0 = local / unsequenced)
    bool has_grh;
    uint8_t grh[40];
    const uint8_t *data = nullptr; // SEND / WRITE payload (not owned), or
    pid_t src_pid = 0;             // ... when data is null: the sender's ranges,
    const std::vector<iovec> *src_iov = nullptr; // read on demand (local only)
    size_t size = 0;
};

struct Reply {
    RespStatus status = RespStatus::Ack;
    uint8_t rnr_timer = 0; // responder's min_rnr_timer, for RNR NAKs
    std::vector<uint8_t> data; // atomic result (owned), or
    const uint8_t *ext = nullptr; // READ data borrowed from a daemon buffer / received frame
    size_t ext_len = 0;
    const uint8_t *bytes() const { return ext ? ext : data.data(); }
    size_t size() const { return ext ? ext_len : data.size(); }
};

class Network;

class Device {
public:
    explicit Device(DeviceConfig cfg);
    ~Device();

    Client &add_client(UniqueFd sock, pid_t pid, uid_t uid);
    void remove_client(uint32_t client_id); // uverbs-close style cleanup
    Client *client(uint32_t id);
    std::vector<uint32_t> client_ids() const;

    // Control: fills resp and the fds to pass back (not owned by caller).
    void handle(Client &c, const proto::Request &req, const int *in_fds, proto::Response &resp,
                std::vector<int> &out_fds);

    // Data path.
    void on_doorbell(Client &c);
    // The "daemon awake" word clients read before ringing (lib ring_doorbell_sq): while it is 1, a post
    // only writes the ring and the daemon finds it in going_to_sleep(), which clears the word and then
    // rescans every send queue (true: it found work, do not sleep). Saves the client's eventfd write and
    // the daemon's wakeup whenever a post comes while the daemon is busy (ping-pong replies).
    int setup_awake_page(); // 0 or errno (then clients always ring)
    void awake() {
        if (awake_) awake_->store(1, std::memory_order_relaxed);
    }
    bool going_to_sleep();
    void on_timers(uint64_t now_ns);
    uint64_t next_timer_ns() const; // 0 = none
    bool idle() const;

    static uint64_t now_ns();

    // Node to node (network.cpp calls these).
    void set_network(Network *n) { net_ = n; }
    Reply respond_remote(const Message &m);
    void on_remote_reply(uint64_t token, const Reply &r);

private:
    // control handlers (control.cpp, control_qp.cpp)
    int do_hello(Client &c, proto::Response &r, std::vector<int> &fds);
    int do_alloc_pd(Client &c, proto::Response &r);
    int do_dealloc_pd(Client &c, uint32_t h);
    int do_reg_mr(Client &c, const proto::RegMrReq &q, proto::Response &r);
    int do_dereg_mr(Client &c, uint32_t h);
    int do_rereg_mr(Client &c, const proto::ReregMrReq &q, proto::Response &r);
    int do_alloc_mw(Client &c, const proto::AllocMwReq &q, proto::Response &r);
    int do_alloc_dm(Client &c, const proto::AllocDmReq &q, proto::Response &r, std::vector<int> &fds);
    int do_free_dm(Client &c, uint32_t h);
    int do_reg_dm_mr(Client &c, const proto::RegDmMrReq &q, proto::Response &r);
    // object import (import.cpp)
    int do_import_device(Client &conn, int fd, proto::Response &r, std::vector<int> &fds);
    int do_import_pd(Client &c, uint32_t h);
    int do_import_mr(Client &c, uint32_t h, proto::Response &r);
    int do_import_dm(Client &c, uint32_t h, proto::Response &r, std::vector<int> &fds);
    int missing_object_error(Client &c, uint32_t h) const;
    int make_event_pipe(Client &c);
    int mr_read(const Mr &mr, uint64_t host, void *dst, size_t n);
    // tail_last: the last 8 bytes become visible after the rest (RDMA WRITE placement, see responder.cpp).
    int mr_write(const Mr &mr, uint64_t host, const void *src, size_t n, bool tail_last = false);
    int do_dealloc_mw(Client &c, uint32_t h);
    uint32_t new_key();
    void unbind_mw(Mw &w);
    ibv_wc_status local_op(Qp &qp, const shm::SendWqe &w); // BIND_MW, LOCAL_INV
    bool invalidate_remote(Qp &t, uint32_t rkey);
    int do_resize_cq(Client &c, const proto::ResizeCqReq &q, proto::Response &r, std::vector<int> &fds);
    int do_create_channel(Client &c, proto::Response &r, std::vector<int> &fds);
    int do_destroy_channel(Client &c, uint32_t h);
    int do_create_cq(Client &c, const proto::CreateCqReq &q, proto::Response &r, std::vector<int> &fds);
    int do_destroy_cq(Client &c, uint32_t h, proto::Response &r);
    int do_open_xrcd(Client &c, const proto::OpenXrcdReq &q, int fd, proto::Response &r);
    int do_close_xrcd(Client &c, uint32_t h);
    int do_create_srq(Client &c, const proto::CreateSrqReq &q, proto::Response &r, std::vector<int> &fds);
    int do_modify_srq(Client &c, const proto::ModifySrqReq &q, proto::Response &r, std::vector<int> &fds);
    int do_query_srq(Client &c, uint32_t h, proto::Response &r);
    int do_destroy_srq(Client &c, uint32_t h, proto::Response &r);
    int do_create_qp(Client &c, const proto::CreateQpReq &q, proto::Response &r, std::vector<int> &fds);
    int do_open_qp(Client &c, const proto::OpenQpReq &q, proto::Response &r);
    int do_modify_qp(Client &c, const proto::ModifyQpReq &q);
    int do_query_qp(Client &c, uint32_t h, proto::Response &r);
    int do_destroy_qp(Client &c, uint32_t h, proto::Response &r);
    int do_status(proto::Response &r, bool json);
    int do_fault(const proto::FaultReq &q);
    // multicast (multicast.cpp)
    int do_attach_mcast(Client &c, const proto::McastReq &q);
    int do_detach_mcast(Client &c, const proto::McastReq &q);
    Reply respond_mcast(const Message &m); // fans a datagram out to this node's members
    void mcast_forget_qp(uint32_t qpn);

    // helpers
    uint32_t new_id() { return next_id_++; }
    template <class T> T *owned(std::map<uint32_t, std::unique_ptr<T>> &m, Client &c, uint32_t h) {
        auto it = m.find(h);
        if (it == m.end() || it->second->owner != &c) return nullptr;
        return it->second.get();
    }
    Qp *qp_by_num(uint32_t qpn);
    Srq *srq_by_num(uint32_t srqn);
    Mr *mr_by_key(uint32_t key);
    Xrcd *xrcd_of_handle(Client &c, uint32_t h);
    void xrcd_put(uint32_t xrcd_id);
    void destroy_qp_object(uint32_t qpn);
    void destroy_srq_object(Srq &s);

    // events
    // True when the record reached the client's event pipe (only then is it
    // counted: destroy verbs wait for exactly the delivered events).
    bool post_async(Client *c, ibv_event_type type, uint64_t cookie, uint32_t port = 0);
    void qp_event(Qp &qp, ibv_event_type type);
    void broadcast_port_event(ibv_event_type type);

    // data path (engine.cpp)
    void pull_sq(Qp &qp);
    void progress(Qp &qp);
    ibv_wc_status build_message(Qp &qp, const shm::SendWqe &w, Message &m, uint16_t &dlid);
    bool handle_reply(Qp &qp, const shm::SendWqe &w, const Reply &rep);
    void forget_inflight(Qp &qp);
    void on_late_reply(uint64_t token, const Reply &r);
    void on_ack_timeout(Qp &qp);
    bool send_next_remote(Qp &qp, uint16_t dlid);
    bool post_cqe(uint32_t cq_id, const shm::Cqe &e, bool solicited);
    void qp_to_error(Qp &qp);
    void flush_qp(Qp &qp);
    int gather(Qp &qp, const shm::SendWqe &w, std::vector<uint8_t> &out, ibv_wc_status &st, bool lazy);
    int copy_src(const Message &m, size_t off, uint8_t *dst, size_t n);
    int copy_to(const Mr &mr, uint64_t host, const Message &m, size_t off, size_t n, bool tail_last = false);
    // A large local copy split between this thread and the copier's (copy_to).
    struct StreamJob {
        Device *dev;
        const Mr *mr;
        uint64_t host;
        const Message *m;
        size_t off;
    };
    static int stream_chunk(void *ctx, size_t at, size_t len, uint8_t *bounce);
    ParallelCopy *copier(size_t chunk);
    ibv_wc_status scatter_msg(Client &owner, uint32_t pd, const shm::Sge *sge, uint32_t nsge, const Message &m,
                              size_t len, size_t skip);
    ibv_wc_status scatter(Client &owner, uint32_t pd, const shm::Sge *sge, uint32_t nsge,
                          const uint8_t *data, size_t len, size_t skip = 0);
    Reply respond(const Message &m);
    RespStatus deliver_recv(Qp &t, Srq *srq, const Message &m, ibv_wc_opcode opcode = IBV_WC_RECV);
    RespStatus remote_mem(Qp &t, Srq *srq, const Message &m, Reply &out);
    bool recv_available(Qp &t, Srq *srq);
    bool take_recv(Qp &t, Srq *srq, shm::RecvWqe &w);
    void complete_send(Qp &qp, const shm::SendWqe &w, ibv_wc_status st);
    void count_ack_timeout(); // the requester retransmits after its ACK timer ran out
    // tag matching (tag_matching.cpp)
    int do_tm_op(Client &c, const proto::TmOpReq &q, proto::Response &r);
    RespStatus tm_deliver(Qp &t, Srq &srq, const Message &m);
    void tm_start_rendezvous(Qp &t, Srq &srq, uint32_t handle, const uint8_t *hdr, size_t hdr_len);
    bool tm_internal_done(Qp &qp, const shm::SendWqe &w, ibv_wc_status st);
    void tm_drop_qp(Qp &qp);

public:
    DeviceConfig cfg;
    ibv_port_state port_state = IBV_PORT_ACTIVE;
    PortCounters counters; // shown in sysfs (ports/1/hw_counters) and by simhca-ctl status/counters
    std::string listing_; // text of the last Status/ListObjects request
    bool stop_requested = false;

private:
    bool debug_ = false; // SIMHCA_DEBUG=1: log failed control requests
    pid_t req_pid_ = 0;  // process that sent the request being handled (memory of MRs it registers)
    uint32_t next_id_ = 1;
    uint32_t next_qpn_ = 0x48;
    uint32_t next_srqn_ = 0x20;
    uint32_t next_key_ = 0x100;
    std::map<uint32_t, std::unique_ptr<Client>> clients_;
    std::map<uint32_t, std::unique_ptr<Pd>> pds_;
    std::map<uint32_t, std::unique_ptr<Mr>> mrs_;
    std::map<uint32_t, uint32_t> key_to_mr_;
    std::map<uint32_t, std::unique_ptr<Mw>> mws_;
    std::map<uint32_t, std::unique_ptr<Dm>> dms_;
    uint64_t dm_bytes_ = 0;
    std::map<uint32_t, uint32_t> key_to_mw_;
    std::map<uint32_t, std::unique_ptr<Channel>> channels_;
    std::map<uint32_t, std::unique_ptr<Cq>> cqs_;
    std::map<uint32_t, std::unique_ptr<Xrcd>> xrcds_;
    std::map<uint32_t, std::unique_ptr<XrcdHandle>> xrcd_handles_;
    std::map<uint32_t, std::unique_ptr<Srq>> srqs_;
    std::map<uint32_t, uint32_t> srqn_to_srq_;
    std::map<uint32_t, std::unique_ptr<Qp>> qps_; // by qpn
    std::map<uint32_t, std::unique_ptr<QpHandle>> qp_handles_;
    std::map<std::pair<uint16_t, std::array<uint8_t, 16>>, std::vector<uint32_t>> mcast_; // (MLID, MGID) -> QPNs
    std::vector<uint8_t> buf_;    // scratch payload buffer, reused
    std::vector<uint8_t> bounce_; // chunk buffer for local streaming copies
    std::unique_ptr<ParallelCopy> copier_; // second copier for large local copies (parallel_copy.hpp)
    bool copier_tried_ = false;
    std::unique_ptr<uint8_t[]> read_buf_; // RDMA READ results (no zero-filling)
    size_t read_cap_ = 0;
    std::vector<iovec> src_iov_;  // sender ranges of a lazily copied payload
    std::vector<uint32_t> doorbell_qpns_; // on_doorbell's snapshot of the client's QPs
    UniqueFd awake_fd_;                   // sealed memfd: clients can only map it read-only
    std::atomic<uint32_t> *awake_ = nullptr;
    Network *net_ = nullptr;
    uint64_t next_stream_ = 0;
    uint64_t next_token_ = 0;
    std::map<uint64_t, uint32_t> inflight_; // token -> requester QPN
    struct Retired {
        uint32_t qpn;
        uint64_t stream, seq;
    };
    std::map<uint64_t, Retired> retired_; // tokens given up by an ACK timeout (their late ACKs still count)
    mutable std::set<uint32_t> timed_;      // QPs that may have a retry / ACK timer armed
};

} // namespace simhca
