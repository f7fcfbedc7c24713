// SPDX-License-Identifier: BSD-3-Clause
// The network (rxe_net.c): node-to-node transport between daemons. TCP, one connection per direction
// and peer (requests go out on our own connection, replies come back on it; the peer's requests arrive
// on the connection it opened). Frames are length-prefixed; everything is non-blocking inside the
// daemon's epoll loop. The requester sends through it; what arrives goes to the Responder (requests) and
// the Completer (answers). Grows with the peer nodes: one connection each way per node that talked.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <sys/uio.h>
#include <vector>

#include "../common/unique_fd.hpp"
#include "delay_line.hpp"
#include "completer.hpp"
#include "fabric.hpp"
#include "object_table.hpp"
#include "packet.hpp"
#include "responder.hpp"

namespace simhca {

class Network {
public:
    // `kind` is the epoll tag kind the server routes to on_event().
    Network(ObjectTable &objs, Responder &resp, Completer &comp, std::vector<FabricNode> nodes, int epoll_fd,
            uint32_t kind);
    ~Network();
    int listen();  // 0 or errno
    // Queues a request for `dlid` on fabric `fabric`; false when no node has that LID there.
    bool send_request(uint32_t fabric, uint16_t dlid, uint64_t token, const Message &m);
    // A datagram to every other node on `fabric` (multicast: each fans it out to its members).
    void send_to_all(uint32_t fabric, const Message &m);
    void on_event(uint32_t conn_id, uint32_t events);
    // Fault injection: drop everything to/from that node until restored.
    bool set_dropped(const std::string &node, bool dropped);
    // Fault injection: everything to/from that node waits `ms` (0 = off)
    // before it is sent / handled, so a round trip takes 2 * ms longer.
    bool set_delay(const std::string &node, uint32_t ms);
    // The subnet manager moved this node's port on `fabric` from `old_lid` to `new_lid`: every daemon
    // routes the new LID here and the old one to nobody. False (nothing changed) when another node
    // holds `new_lid` on that fabric.
    bool change_lid(uint32_t fabric, uint16_t old_lid, uint16_t new_lid);

private:
    struct Conn {
        uint32_t id = 0;
        UniqueFd fd;
        bool outgoing = false, connected = false;
        uint16_t peer_lid = 0;
        std::vector<uint8_t> out;  // unsent bytes (only what the socket refused)
        // While the frames of one read are handled, small frames for this connection (replies; requests
        // that those replies let go) are collected here and leave in one send after the batch.
        bool corked = false;
        std::vector<uint8_t> cork;
        size_t out_off = 0;
        // Receive buffer without zero-filling: [in_off, in_len) is unparsed.
        std::unique_ptr<uint8_t[]> in;
        size_t in_cap = 0, in_off = 0, in_len = 0;
    };
    Conn *connect_to(uint16_t lid);
    void queue(Conn &c, uint32_t type, uint64_t token, const void *a, size_t alen, const void *b, size_t blen);
    void flush(Conn &c);
    void uncork(uint32_t id);
    void send_iov(Conn &c, iovec *iov, int n);
    void on_readable(Conn &c);
    // `held`: the frame already waited in the delay line.
    void handle_frame(Conn &c, uint32_t type, uint64_t token, const uint8_t *body, size_t len, bool held = false);
    // Keeps a copy of a frame to/from `lid` in the delay line.
    void hold(uint16_t lid, bool inbound, uint32_t conn_id, uint32_t type, uint64_t token, const void *a, size_t alen,
              const void *b, size_t blen);
    void release_held();
    void close_conn(uint32_t id);
    void watch(Conn &c, bool want_write);
    // A node's key is its rail-1 LID as the fabric file gave it (FabricNode::lid): a LID change updates
    // FabricNode::lids, never the key, so connections, drops and delays keep their node.
    const FabricNode *node_by_key(uint16_t key) const;
    void apply_lid_change(uint16_t key, uint32_t fabric, uint16_t old_lid, uint16_t new_lid);
    void index_lids();  // rebuilds key_of_lid_
    const FabricNode *node_on_fabric(uint32_t fabric, uint16_t lid) const;
    // The node key of a LID of any rail; the map is empty with one rail and no LID change, so free on the
    // data path.
    uint16_t node_key(uint16_t lid) const {
        auto it = key_of_lid_.find(lid);
        return it == key_of_lid_.end() ? lid : it->second;
    }

    ObjectTable &objs_;
    Responder &resp_;
    Completer &comp_;
    std::vector<FabricNode> nodes_;
    uint16_t my_lid_;
    int epoll_;
    uint32_t kind_;
    UniqueFd listen_;
    uint32_t next_id_ = 1;
    std::map<uint32_t, std::unique_ptr<Conn>> conns_;
    std::map<uint16_t, uint32_t> out_by_lid_;
    std::map<uint16_t, uint16_t> key_of_lid_;  // every LID that is not its node's key -> that key
    std::set<uint16_t> dropped_;
    DelayLine delay_;
};

}  // namespace simhca
