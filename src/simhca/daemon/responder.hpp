// The responder (rxe_resp.c): what the target HCA does with an incoming request. Routing: RC / UC by QPN
// and the connected peer, UD by QPN and Q_Key, XRC by the TGT QPN plus remote_srqn (the SRQ must be in the
// TGT QP's XRCD), multicast by group (multicast.cpp). Requests from other nodes are sequenced per requester
// QP (respond_remote): duplicates get their recorded answer again, early ones are discarded. Receives
// complete on the receive CQ (XRC and TM SRQs: the SRQ's CQ) through the Completer's CQE writer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include <infiniband/verbs.h>

#include "../common/shm_layout.hpp"
#include "dma.hpp"
#include "object_table.hpp"
#include "packet.hpp"

namespace simhca {

class Completer;

class Responder {
public:
    Responder(ObjectTable &objs, Dma &dma, Completer &comp) : objs_(objs), dma_(dma), comp_(comp) {}

    // A request from this node's requester (unsequenced).
    Reply respond(const Message &m);
    // A request from another node (the network): sequenced, duplicates answered again.
    Reply respond_remote(const Message &m);
    // A datagram to a multicast group: every member on this node gets a copy (multicast.cpp).
    Reply respond_mcast(const Message &m);

private:
    RespStatus deliver_recv(Qp &t, Srq *srq, const Message &m, ibv_wc_opcode opcode = IBV_WC_RECV);
    RespStatus remote_mem(Qp &t, Srq *srq, const Message &m, Reply &out);
    bool recv_available(Qp &t, Srq *srq);
    bool take_recv(Qp &t, Srq *srq, shm::RecvWqe &w);
    bool invalidate_remote(Qp &t, uint32_t rkey);  // SEND_WITH_INV (memory_window.cpp)
    // tag matching (tag_matching.cpp)
    RespStatus tm_deliver(Qp &t, Srq &srq, const Message &m);
    void tm_start_rendezvous(Qp &t, Srq &srq, uint32_t handle, const uint8_t *hdr, size_t hdr_len);

    ObjectTable &objs_;
    Dma &dma_;
    Completer &comp_;
    std::unique_ptr<uint8_t[]> read_buf_;  // RDMA READ results (no zero-filling)
    size_t read_cap_ = 0;
};

}  // namespace simhca
