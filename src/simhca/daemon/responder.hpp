// SPDX-License-Identifier: BSD-3-Clause
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

// The steps of one request at the responder, named after rxe_resp.c's (which has more: it also reassembles
// multi-packet messages and builds READ responses packet by packet; here every Message is a whole one).
enum class RespState : uint8_t {
    GetQp,          // the destination QP (a multicast group fans out instead), receiving (RTR, RTS, SQD)
    CheckRoute,     // it takes this requester's messages: connected peer, UD Q_Key, XRC SRQ in its XRCD
    CheckOpValid,   // the QP type serves the opcode
    CheckResource,  // a receive WQE for a WRITE with immediate (else RNR NAK)
    Execute,        // SEND into a receive (or a TM SRQ's matcher); WRITE / READ / atomics on remote memory
    Complete,       // WRITE with immediate: the receive completion after the write
    Acknowledge,    // the answer (UC answers nothing: anything but an ACK becomes a silent drop)
    Done,
};

class Responder {
public:
    Responder(ObjectTable &objs, Dma &dma, Completer &comp) : objs_(objs), dma_(dma), comp_(comp) {}

    // A request from this node's requester (unsequenced).
    Reply respond(const Message &m);
    // A request from another node (the network): sequenced, duplicates answered again.
    Reply respond_remote(const Message &m);
    // The answer to a request from another node never leaves: the port it came in through loses answers
    // (fault ack-drop). The request itself was handled (delivered, written, executed) all the same.
    bool answer_lost(const Message &m) const;
    // A datagram to a multicast group: every member on this node gets a copy (multicast.cpp).
    Reply respond_mcast(const Message &m);

private:
    void responder_error(Qp &t, RespStatus st);  // a class C error: the QP to ERR, its event to every handle
    // Sequencing of requests from other nodes (rxe's CHK_PSN).
    enum class PsnCheck { Unsequenced, Expected, Duplicate, OutOfSequence };
    static constexpr size_t kReplay = 64;  // recorded answers per QP: more than the requester's window
    PsnCheck check_psn(Qp *t, const Message &m);
    Reply duplicate(Qp &t, const Message &m);
    bool check_route(Qp &t, const Message &m, Srq *&srq, RespStatus &st);
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
