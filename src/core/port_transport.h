// Everything one process holds on one device port, and the XRC wire-up:
//   PD, one CQ, the job's XRC domain, one XRC SRQ per receive class (RecvPool),
//   one XRC INI QP per remote node of the job (SendQueue), created in INIT before the modex fence,
//   the TGT QPs this process owns (one per remote sending process it is the node's owner for), created in INIT,
//   a loopback INI + TGT pair for on-node peers, made only when xrc carries on-node traffic,
//   and ibv_open_qp handles on the TGT QPs other local ranks own, opened when a peer is connected.
// After the fence: bring_up_owned_tgts() moves the owned TGT QPs to RTR/RTS (during MPI_Init, so they are ready
// before any sender leaves MPI_Init), connect() readies the INI QP toward a peer's node and this process's handle
// on the TGT QP through which that peer reaches it.
#pragma once

#include "address.h"
#include "counters.h"
#include "device_discovery.h"
#include "node_map.h"
#include "qp_attr.h"
#include "receive_queue_spec.h"
#include "recv_pool.h"
#include "send_queue.h"
#include "verbs_owners.h"
#include "xrc_domain.h"

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace xrc {

struct TransportConfig {
    std::vector<ReceiveQueueClass> receive_classes;
    int cq_size = 8192;
    int send_queue_depth = 512;
    int max_inline = -1;  // -1: as much as the device gives, up to 256
    int signal_interval = 32;
    int poll_batch = 16;
    int mtu_bytes = 0;  // 0: the port's active MTU
    PathSettings path;
    std::string xrcd_dir;
    std::string job_name;  // unique per job and user: part of the XRC domain file's name
};

// What sending to one peer needs (kept in the BTL endpoint).
struct PeerRoute {
    SendQueue *queue = nullptr;  // the INI QP toward the peer's node
    std::vector<SrqEntry> srqs;  // the peer's SRQs, ascending buffer size
    std::uint32_t rank = 0;

    // The SRQ number of the smallest class that holds `bytes`, 0 if none does.
    std::uint32_t srq_for(std::size_t bytes) const noexcept {
        for (const auto &s : srqs)
            if (s.buffer_size >= bytes) return s.srq_num;
        return 0;
    }
};

struct TransportCounts {
    std::size_t ini_qps = 0, tgt_qps_owned = 0, tgt_handles = 0, srqs = 0, receive_bytes = 0;
};

class PortTransport {
public:
    using AddressLookup = std::function<const PortAddress *(std::uint32_t rank)>;

    PortTransport(std::shared_ptr<OpenedDevice> device, const UsablePort &port, const TransportConfig &config,
                  const NodeMap &map, std::uint32_t my_rank, std::string &error);
    PortTransport(const PortTransport &) = delete;
    PortTransport &operator=(const PortTransport &) = delete;
    ~PortTransport();

    const PortAddress &address() const noexcept { return address_; }
    const std::string &device_name() const noexcept { return device_->name; }
    std::uint8_t port_num() const noexcept { return port_.port; }
    ibv_pd *pd() const noexcept { return pd_.get(); }
    ibv_cq *cq() const noexcept { return cq_.get(); }
    ibv_context *context() const noexcept { return device_->context.get(); }
    std::uint32_t max_inline() const noexcept { return max_inline_; }
    std::uint32_t poll_batch() const noexcept { return poll_batch_; }
    TransportCounts counts() const noexcept;

    // After the fence. Both return an empty string or why it failed.
    std::string bring_up_owned_tgts(const AddressLookup &lookup);
    std::string connect(std::uint32_t peer_rank, const AddressLookup &lookup, PeerRoute &route);
    // The send queue to on-node peers (through the HCA's loopback), made on first use; nullptr + error if not.
    SendQueue *loopback_queue(std::string &error);

    // True when no operation that reports its completion is outstanding or queued on any send queue.
    bool all_reported() const noexcept {
        for (const auto &q : send_queues_)
            if (q && (q->outstanding_callbacks() > 0 || q->has_pending())) return false;
        return true;
    }
    bool any_broken() const noexcept {
        for (const auto &q : send_queues_)
            if (q && q->broken()) return true;
        return false;
    }

    // After the fence all local ranks hold the XRCD: its file can go.
    void release_domain_file() noexcept { domain_->unlink_file(); }

    // Where connections opened and closed are counted (the module's counters; they outlive the transport).
    void count_into(Counters *counters) noexcept { counters_ = counters != nullptr ? counters : &uncounted_; }

private:
    // Our path settings toward a remote port: the common MTU, and a GRH when it is in another subnet.
    PathSettings path_toward(const PortAddress &remote) const noexcept;
    QpPtr create_ini(std::string &error);
    QpPtr create_tgt(std::string &error);
    std::string ready_ini(std::uint32_t node, const AddressLookup &lookup);
    std::string ready_tgt(ibv_qp *qp, std::uint32_t sender, const PortAddress &sender_address);
    ibv_qp *tgt_handle_for(std::uint32_t sender, const AddressLookup &lookup, std::string &error);
    void connection_opened() noexcept {
        ++connections_;
        count_connection_opened(*counters_);
    }

    std::shared_ptr<OpenedDevice> device_;
    UsablePort port_;
    const NodeMap &map_;
    std::uint32_t my_rank_;
    std::uint32_t my_node_;
    PathSettings path_;
    std::uint32_t max_inline_ = 0;
    std::uint32_t inline_wanted_ = 0;
    std::uint32_t depth_ = 0;
    std::uint32_t signal_interval_ = 1;
    std::uint32_t poll_batch_ = 16;
    PortAddress address_;

    // Declaration order is destruction order reversed: QPs before SRQs before the XRCD, CQ and PD.
    PdPtr pd_;
    CqPtr cq_;
    std::unique_ptr<XrcDomain> domain_;
    std::vector<std::unique_ptr<RecvPool>> pools_;
    std::vector<QpPtr> ini_qps_;                            // by node (own node: loopback, made on first use)
    std::vector<std::unique_ptr<SendQueue>> send_queues_;   // by node
    std::vector<bool> ini_ready_;                           // by node
    std::unordered_map<std::uint32_t, QpPtr> owned_tgts_;   // by sender rank
    std::unordered_map<std::uint32_t, QpPtr> opened_tgts_;  // by sender rank (owned by another local rank)
    QpPtr loopback_tgt_;                                    // this process's own TGT QP for on-node traffic
    Counters uncounted_;                                    // until count_into() names the real ones
    Counters *counters_ = &uncounted_;
    std::uint64_t connections_ = 0;                         // INI QPs readied, TGT QPs readied or opened
};

}  // namespace xrc
