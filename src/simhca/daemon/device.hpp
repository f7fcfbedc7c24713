// SPDX-License-Identifier: BSD-3-Clause
// The simulated adapter's control side (what uverbs and the kernel driver do for verbs calls): the
// control verbs that create, modify and destroy the objects of the shared table, client bookkeeping and
// uverbs-close style cleanup, inspection and fault injection. It owns the table and the data path's roles
// (requester.hpp, responder.hpp, completer.hpp, dma.hpp, doorbell.hpp). Single-threaded: the server's
// epoll loop calls into it, so no locking.
#pragma once
#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

#include "../common/protocol.hpp"
#include "../common/unique_fd.hpp"
#include "completer.hpp"
#include "dma.hpp"
#include "doorbell.hpp"
#include "object_table.hpp"
#include "packet.hpp"
#include "requester.hpp"
#include "responder.hpp"

namespace simhca {

class Network;

class Device {
public:
    explicit Device(DeviceConfig cfg);
    ~Device();

    ObjectTable &objects() { return objs_; }
    Client &add_client(UniqueFd sock, pid_t pid, uid_t uid);
    void remove_client(uint32_t client_id);  // uverbs-close style cleanup
    Client *client(uint32_t id) { return objs_.client(id); }
    std::vector<uint32_t> client_ids() const;

    // Control: fills resp and the fds to pass back (not owned by caller).
    void handle(Client &c, const proto::Request &req, const int *in_fds, proto::Response &resp,
                std::vector<int> &out_fds);

    // The data path's roles, for the event loop (doorbells, timers) and the network (requests, answers).
    Doorbells &doorbells() { return doorbells_; }
    Completer &completer() { return completer_; }
    Responder &responder() { return responder_; }
    void set_network(Network *n) {
        net_ = n;
        requester_.set_network(n);
    }

    // Flaps (faults.cpp): when the next port comes back by itself (0 = none), and bringing back those due.
    uint64_t flap_due_ns() const;
    void on_flap_timers(uint64_t now);

    std::string listing_;  // text of the last Status/ListObjects request
    bool stop_requested = false;

private:
    // control handlers (control.cpp, control_qp.cpp)
    int do_hello(Client &c, uint32_t device, proto::Response &r, std::vector<int> &fds);
    void fill_identity(proto::HelloResp &h, uint32_t device) const;  // what Hello / Probe / import tell
    int do_query_port(Client &c, uint32_t port_num, proto::Response &r) const;
    int do_alloc_pd(Client &c, proto::Response &r);
    int do_dealloc_pd(Client &c, uint32_t h);
    int do_reg_mr(Client &c, const proto::RegMrReq &q, proto::Response &r);
    int do_dereg_mr(Client &c, uint32_t h);
    int do_rereg_mr(Client &c, const proto::ReregMrReq &q, proto::Response &r);
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
    void xrcd_put(uint32_t xrcd_id);
    void destroy_qp_object(uint32_t qpn);
    void destroy_srq_object(Srq &s);
    // memory windows (memory_window.cpp) and device memory (device_memory.cpp)
    int do_alloc_mw(Client &c, const proto::AllocMwReq &q, proto::Response &r);
    int do_dealloc_mw(Client &c, uint32_t h);
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
    // multicast membership (multicast.cpp)
    int do_attach_mcast(Client &c, const proto::McastReq &q);
    int do_detach_mcast(Client &c, const proto::McastReq &q);
    void mcast_forget_qp(uint32_t qpn);
    // tag matching list operations (tag_matching.cpp)
    int do_tm_op(Client &c, const proto::TmOpReq &q, proto::Response &r);
    // inspection and fault injection (status.cpp)
    int do_status(proto::Response &r, bool json);
    // fault injection (faults.cpp)
    int do_fault(const proto::FaultReq &q);
    int fault_event(const proto::FaultReq &q);
    static bool selects(const proto::FaultReq &q, const Port &p);
    void set_port_state(Port &p, ibv_port_state st, bool announce = true);

    bool debug_ = false;  // SIMHCA_DEBUG=1: log failed control requests
    pid_t req_pid_ = 0;   // process that sent the request being handled (memory of MRs it registers)
    Network *net_ = nullptr;
    // The shared table and the roles over it (plain classes holding references to each other: no virtual
    // dispatch on the data path). Constructed in this order; none uses another in its constructor.
    ObjectTable objs_;
    Dma dma_{objs_};
    Completer completer_{objs_, dma_, requester_};
    Responder responder_{objs_, dma_, completer_};
    Requester requester_{objs_, dma_, completer_, responder_};
    Doorbells doorbells_{objs_, requester_, completer_};
};

}  // namespace simhca
