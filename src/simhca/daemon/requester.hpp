// SPDX-License-Identifier: BSD-3-Clause
// The requester (rxe_req.c): takes send WQEs from the shared rings in order, executes local ones (BIND_MW,
// LOCAL_INV), builds the request for the others (gathering the payload, or only the sender's address ranges
// when the responder is on this node and streams them itself) and hands it to the responder: the local
// Responder directly, or the Network, which keeps a window of up to 16 requests (4 MiB) per QP on the wire.
// Answers go to the Completer, which calls progress() again when the QP may send more.
#pragma once
#include <cstdint>
#include <sys/uio.h>
#include <vector>

#include <infiniband/verbs.h>

#include "../common/shm_layout.hpp"
#include "dma.hpp"
#include "object_table.hpp"
#include "packet.hpp"

namespace simhca {

class Completer;
class Network;
class Responder;

class Requester {
public:
    Requester(ObjectTable &objs, Dma &dma, Completer &comp, Responder &resp)
        : objs_(objs), dma_(dma), comp_(comp), resp_(resp) {}

    void set_network(Network *n) { net_ = n; }
    // Takes what the client posted since the last call (the doorbell, the rescan before sleeping, RTS).
    void pull_sq(Qp &qp);
    // Sends (or, locally, executes) pending WQEs until the QP has to wait for answers or a timer.
    void progress(Qp &qp);
    // A new connection epoch for a QP entering RTS (the responder resynchronises on it).
    uint64_t new_stream() { return (uint64_t(objs_.cfg.lid) << 48) | ++next_stream_; }

private:
    ibv_wc_status build_message(Qp &qp, const shm::SendWqe &w, Message &m, uint16_t &dlid);
    int gather(Qp &qp, const shm::SendWqe &w, std::vector<uint8_t> &out, ibv_wc_status &st, bool lazy);
    bool send_next_remote(Qp &qp, uint16_t dlid);
    ibv_wc_status local_op(Qp &qp, const shm::SendWqe &w);  // BIND_MW, LOCAL_INV (memory_window.cpp)

    ObjectTable &objs_;
    Dma &dma_;
    Completer &comp_;
    Responder &resp_;
    Network *net_ = nullptr;
    std::vector<uint8_t> buf_;    // scratch payload buffer, reused
    std::vector<iovec> src_iov_;  // sender ranges of a lazily copied payload
    uint64_t next_stream_ = 0;
    uint64_t next_token_ = 0;
};

}  // namespace simhca
