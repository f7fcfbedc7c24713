// SPDX-License-Identifier: BSD-3-Clause
// The shared object table: every object the adapter holds for its clients (what the adapter and the kernel
// hold on real hardware, rxe's object pools), the port, and the lookups every role uses. The control verbs
// (Device) create and destroy the entries; the data path roles (Requester, Responder, Completer, Dma) only
// look them up and change their state. Single-threaded like the rest of the daemon (the copier thread never
// touches it). Each map grows with the objects its node's clients hold: O(objects), nothing per peer node.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <infiniband/verbs.h>

#include "objects.hpp"
#include "sysfs.hpp"

namespace simhca {

struct DeviceConfig {
    std::string node = "node0";
    uint16_t lid = 1;       // the node's LID on fabric 1 (rail 1): names the node in streams and logs
    std::string sysfs_dir;  // device 0's directory, ROOT/class/infiniband/simhca0 (the others sit next to it)
    uint32_t devices = 1, ports = 1;
    // LID of each rail (index rail - 1; rail r = device * ports + port), 0 = not on a fabric (port DOWN).
    std::vector<uint16_t> rail_lids;
};

// One port of one device: a rail. Rail r (1-based, device-major) sits on fabric r, a subnet of its own
// (its own subnet prefix and LIDs): a packet only reaches ports of the same fabric.
struct Port {
    uint8_t device = 0;    // index of simhcaN
    uint8_t port_num = 1;  // 1..ports
    uint16_t lid = 0;
    uint32_t fabric = 1;                        // = rail number
    uint64_t subnet_prefix = 0, port_guid = 0;  // host order
    ibv_port_state state = IBV_PORT_ACTIVE;
    uint8_t active_speed = 32, active_width = 2;  // EDR, 4X (ibv_port_attr encodings)
    PortCounters counters;    // shown in sysfs (ports/N/hw_counters) and by simhca-ctl status/counters
    uint64_t flap_up_ns = 0;  // a flap in progress: when the daemon brings the port back (0 = none)
    // `fault ack-drop`: the link still carries requests both ways but loses every answer (ACK, NAK, read or atomic
    // response) that crosses it, as a link dying between a request's data and its acknowledgement does.
    bool ack_drop = false;
};

// An answer to a reliable request through `p` never arrives: the port has no link, or its link loses answers
// (UC has no acknowledgement on the wire: its completions here come from the answer, which never gets lost).
inline bool answer_lost(const Port &p, ibv_qp_type requester) {
    return p.state != IBV_PORT_ACTIVE || (p.ack_drop && requester != IBV_QPT_UC);
}

struct ObjectTable {
    explicit ObjectTable(DeviceConfig c);

    DeviceConfig cfg;
    std::vector<Port> ports;  // every rail, index rail - 1 (device-major); set up by the constructor

    // Ids are daemon-wide (one number space for every handle); QPNs, SRQNs and keys have their own.
    std::map<uint32_t, std::unique_ptr<Client>> clients;
    std::map<uint32_t, std::unique_ptr<Pd>> pds;
    std::map<uint32_t, std::unique_ptr<Mr>> mrs;
    std::map<uint32_t, uint32_t> key_to_mr;
    std::map<uint32_t, std::unique_ptr<Mw>> mws;
    std::map<uint32_t, uint32_t> key_to_mw;
    std::map<uint32_t, std::unique_ptr<Dm>> dms;
    uint64_t dm_bytes = 0;
    std::map<uint32_t, std::unique_ptr<Channel>> channels;
    std::map<uint32_t, std::unique_ptr<Cq>> cqs;
    std::map<uint32_t, std::unique_ptr<Xrcd>> xrcds;
    std::map<uint32_t, std::unique_ptr<XrcdHandle>> xrcd_handles;
    std::map<uint32_t, std::unique_ptr<Srq>> srqs;
    std::map<uint32_t, uint32_t> srqn_to_srq;
    std::map<uint32_t, std::unique_ptr<Qp>> qps;  // by qpn
    std::map<uint32_t, std::unique_ptr<QpHandle>> qp_handles;
    std::map<std::pair<uint16_t, std::array<uint8_t, 16>>, std::vector<uint32_t>> mcast;  // (MLID, MGID) -> QPNs
    uint32_t next_id = 1;
    uint32_t next_qpn = 0x48;
    uint32_t next_srqn = 0x20;
    uint32_t next_key = 0x100;

    uint32_t new_id() { return next_id++; }
    uint32_t new_key();  // an MR / MW key no MR or MW uses
    // The object `h` of map `m` when client `c` owns it.
    template <class T>
    T *owned(std::map<uint32_t, std::unique_ptr<T>> &m, Client &c, uint32_t h) {
        auto it = m.find(h);
        if (it == m.end() || it->second->owner != &c) return nullptr;
        return it->second.get();
    }
    Client *client(uint32_t id);
    Qp *qp_by_num(uint32_t qpn);
    Srq *srq_by_num(uint32_t srqn);
    Mr *mr_by_key(uint32_t key);
    Xrcd *xrcd_of_handle(Client &c, uint32_t h);
    void unbind_mw(Mw &w);  // and the MR it was bound to counts one window less

    // Asynchronous events. True when the record reached the client's event pipe (only then is it counted:
    // destroy verbs wait for exactly the delivered events).
    bool post_async(Client *c, ibv_event_type type, uint64_t cookie, uint32_t port = 0);
    void qp_event(Qp &qp, ibv_event_type type);  // to every handle of the QP
    // Port events go to the contexts of the port's device only.
    void broadcast_port_event(const Port &p, ibv_event_type type);
    uint32_t rail_of(uint32_t device, uint32_t port_num) const { return device * cfg.ports + port_num - 1; }
    // Device `dev`'s sysfs directory (device 0's with its number replaced).
    std::string sysfs_dir(uint32_t dev) const;
    // The daemon-wide port counters file of `p` rewritten (after a counter changed).
    void counters_changed(const Port &p);
};

}  // namespace simhca
