#include "port_transport.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace xrc {
namespace {

std::string errno_text(const std::string &what) {
    const int saved = errno;
    return what + ": " + std::strerror(saved);
}

int modify(ibv_qp *qp, const QpTransition &t) noexcept {
    auto attr = t.attr;  // ibv_modify_qp takes a non-const attr
    return ibv_modify_qp(qp, &attr, t.mask);
}

ibv_qp_state query_state(ibv_qp *qp) noexcept {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    if (ibv_query_qp(qp, &attr, IBV_QP_STATE, &init) != 0) return IBV_QPS_UNKNOWN;
    return attr.qp_state;
}

ibv_gid gid_of(const PortAddress &a) {
    ibv_gid gid{};
    std::memcpy(gid.raw, a.gid, sizeof(gid.raw));
    return gid;
}

const TgtEntry *find_tgt(const PortAddress &owner, std::uint32_t sender) {
    for (const auto &t : owner.tgt_qps)
        if (t.sender_rank == sender) return &t;
    return nullptr;
}

}  // namespace

PortTransport::PortTransport(std::shared_ptr<OpenedDevice> device, const UsablePort &port,
                             const TransportConfig &config, const NodeMap &map, std::uint32_t my_rank,
                             std::string &error)
    : device_(std::move(device)), port_(port), map_(map), my_rank_(my_rank), my_node_(map.node_of(my_rank)),
      path_(config.path) {
    ibv_context *ctx = device_->context.get();
    path_.port_num = port_.port;
    const ibv_mtu wanted = config.mtu_bytes != 0 ? mtu_from_bytes(config.mtu_bytes) : port_.port_attr.active_mtu;
    path_.mtu = std::min(wanted, port_.port_attr.active_mtu);
    path_.max_rd_atomic = static_cast<std::uint8_t>(
        std::min<int>(path_.max_rd_atomic, std::max(1, std::min(device_->device_attr.max_qp_rd_atom,
                                                                device_->device_attr.max_qp_init_rd_atom))));
    poll_batch_ = static_cast<std::uint32_t>(config.poll_batch);

    pd_.reset(ibv_alloc_pd(ctx));
    if (!pd_) {
        error = errno_text("ibv_alloc_pd");
        return;
    }
    // One CQ takes every receive completion (at most the posted SRQ buffers) and every send completion (at
    // most a full send queue per node): size it so it can never overrun, shrinking the send queues if the
    // device's CQ limit forces it.
    std::size_t receive_entries = 0;
    for (const auto &cls : config.receive_classes) receive_entries += cls.count;
    const std::size_t nodes = map_.node_count();
    const std::size_t max_cqe = static_cast<std::size_t>(device_->device_attr.max_cqe);  // (+1 node: loopback)
    std::size_t depth = static_cast<std::size_t>(std::min(config.send_queue_depth, device_->device_attr.max_qp_wr));
    if (receive_entries + nodes * depth > max_cqe) {
        if (receive_entries + nodes * 16 > max_cqe) {
            error = "the device's completion queues (" + std::to_string(max_cqe) + " entries) cannot hold " +
                    std::to_string(receive_entries) + " receive buffers plus 16 sends toward each of " +
                    std::to_string(nodes) + " nodes: lower the counts in btl_xrc_receive_queues";
            return;
        }
        depth = (max_cqe - receive_entries) / nodes;
    }
    const int cqe = static_cast<int>(
        std::min(max_cqe, std::max(static_cast<std::size_t>(config.cq_size), receive_entries + nodes * depth)));
    cq_.reset(ibv_create_cq(ctx, cqe, nullptr, nullptr, 0));
    if (!cq_) {
        error = errno_text("ibv_create_cq") + " (" + std::to_string(cqe) + " entries)";
        return;
    }
    domain_ = std::make_unique<XrcDomain>(ctx, config.xrcd_dir, config.job_name, device_->name, error);
    if (!error.empty()) return;
    for (const auto &cls : config.receive_classes) {
        pools_.push_back(std::make_unique<RecvPool>(ctx, pd_.get(), cq_.get(), domain_->get(),
                                                    static_cast<std::uint32_t>(cls.buffer_size), cls.count,
                                                    cls.low_watermark, error));
        if (!error.empty()) return;
    }

    ibv_gid gid{};
    if (ibv_query_gid(ctx, port_.port, path_.gid_index, &gid) != 0) {
        error = "ibv_query_gid(index " + std::to_string(path_.gid_index) + ") failed";
        return;
    }
    address_.lid = port_.port_attr.lid;
    address_.port_num = port_.port;
    address_.mtu = static_cast<std::uint8_t>(path_.mtu);
    std::memcpy(address_.gid, gid.raw, sizeof(address_.gid));
    address_.node_index = my_node_;
    for (const auto &pool : pools_) address_.srqs.push_back({pool->buffer_size(), pool->srq_num()});

    // One INI QP per remote node, and the TGT QPs this process owns on its node: one per sending process of
    // another node assigned to it. On-node peers go through the HCA's loopback, on QPs made only when xrc
    // actually carries on-node traffic (loopback_queue): with vader present that never happens, and the node
    // holds exactly 2*P*(N-1) XRC QPs.
    depth_ = static_cast<std::uint32_t>(depth);
    signal_interval_ = static_cast<std::uint32_t>(config.signal_interval);
    inline_wanted_ = config.max_inline < 0 ? 256u : static_cast<std::uint32_t>(config.max_inline);
    max_inline_ = inline_wanted_;
    for (std::uint32_t node = 0; node < map_.node_count(); ++node) {
        ini_qps_.emplace_back();
        send_queues_.emplace_back();
        ini_ready_.push_back(false);
        if (node == my_node_) {
            address_.ini_qp_by_node.push_back(0);
            continue;
        }
        QpPtr qp = create_ini(error);
        if (!qp) {
            error += " (toward node " + map_.node_name(node) + ")";
            return;
        }
        address_.ini_qp_by_node.push_back(qp->qp_num);
        send_queues_[node] = std::make_unique<SendQueue>(qp.get(), depth_, signal_interval_, node);
        ini_qps_[node] = std::move(qp);
    }
    for (const std::uint32_t sender : map_.tgt_qps_owned_by(my_rank_)) {
        if (map_.node_of(sender) == my_node_) continue;
        QpPtr qp = create_tgt(error);
        if (!qp) return;
        address_.tgt_qps.push_back({sender, qp->qp_num});
        owned_tgts_.emplace(sender, std::move(qp));
    }
}

QpPtr PortTransport::create_ini(std::string &error) {
    ibv_qp_init_attr_ex attr{};
    attr.qp_type = IBV_QPT_XRC_SEND;
    attr.send_cq = cq_.get();
    attr.recv_cq = cq_.get();
    attr.cap.max_send_wr = depth_;
    attr.cap.max_send_sge = 1;
    attr.cap.max_inline_data = inline_wanted_;
    attr.comp_mask = IBV_QP_INIT_ATTR_PD;
    attr.pd = pd_.get();
    QpPtr qp(ibv_create_qp_ex(context(), &attr));
    if (!qp && inline_wanted_ > 0) {  // the device may not inline that much: ask for what it allows
        attr.cap.max_inline_data = 0;
        qp.reset(ibv_create_qp_ex(context(), &attr));
    }
    if (!qp) {
        error = errno_text("creating an XRC send (INI) QP");
        return nullptr;
    }
    // Every INI QP must take what the fast path inlines: keep the smallest the device granted.
    max_inline_ = std::min(max_inline_, inline_wanted_ == 0 ? 0u : attr.cap.max_inline_data);
    if (modify(qp.get(), ini_to_init(path_)) != 0) {
        error = errno_text("XRC send QP RESET->INIT");
        return nullptr;
    }
    return qp;
}

QpPtr PortTransport::create_tgt(std::string &error) {
    ibv_qp_init_attr_ex attr{};
    attr.qp_type = IBV_QPT_XRC_RECV;
    attr.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    attr.xrcd = domain_->get();
    QpPtr qp(ibv_create_qp_ex(context(), &attr));
    if (!qp) {
        error = errno_text("creating an XRC receive (TGT) QP");
        return nullptr;
    }
    if (modify(qp.get(), tgt_to_init(path_)) != 0) {
        error = errno_text("XRC TGT QP RESET->INIT");
        return nullptr;
    }
    return qp;
}

SendQueue *PortTransport::loopback_queue(std::string &error) {
    if (send_queues_[my_node_]) return send_queues_[my_node_].get();
    // The sender makes both ends: its INI QP and a TGT QP in the node's shared XRC domain, through which it
    // reaches every local rank's SRQ. The TGT QP lives as long as its only user, the sender.
    QpPtr ini = create_ini(error);
    if (!ini) return nullptr;
    QpPtr tgt = create_tgt(error);
    if (!tgt) return nullptr;
    ibv_gid gid{};
    std::memcpy(gid.raw, address_.gid, sizeof(gid.raw));
    const RemoteQp ini_end{address_.lid, gid, ini->qp_num, initial_psn(ini->qp_num)};
    const RemoteQp tgt_end{address_.lid, gid, tgt->qp_num, initial_psn(tgt->qp_num)};
    if (modify(tgt.get(), tgt_to_rtr(path_, ini_end)) != 0 ||
        modify(tgt.get(), tgt_to_rts(path_, initial_psn(tgt->qp_num))) != 0) {
        error = errno_text("readying the loopback XRC TGT QP");
        return nullptr;
    }
    if (modify(ini.get(), ini_to_rtr(path_, tgt_end)) != 0 ||
        modify(ini.get(), ini_to_rts(path_, initial_psn(ini->qp_num))) != 0) {
        error = errno_text("readying the loopback XRC send QP");
        return nullptr;
    }
    send_queues_[my_node_] = std::make_unique<SendQueue>(ini.get(), depth_, signal_interval_, my_node_);
    ini_qps_[my_node_] = std::move(ini);
    loopback_tgt_ = std::move(tgt);
    ini_ready_[my_node_] = true;
    connection_opened();
    return send_queues_[my_node_].get();
}

PortTransport::~PortTransport() {
    count_connections_closed(*counters_, connections_);
    // QPs first (they reference the SRQs' XRCD and the CQ), then SRQs, the domain, the CQ, the PD.
    loopback_tgt_.reset();
    opened_tgts_.clear();
    owned_tgts_.clear();
    send_queues_.clear();
    ini_qps_.clear();
    pools_.clear();
    domain_.reset();
    cq_.reset();
    pd_.reset();
}

TransportCounts PortTransport::counts() const noexcept {
    TransportCounts c;
    for (const auto &qp : ini_qps_) c.ini_qps += qp != nullptr;
    c.tgt_qps_owned = owned_tgts_.size() + (loopback_tgt_ != nullptr);
    c.tgt_handles = opened_tgts_.size();
    c.srqs = pools_.size();
    for (const auto &p : pools_) c.receive_bytes += p->registered_bytes();
    return c;
}

PathSettings PortTransport::path_toward(const PortAddress &remote) const noexcept {
    PathSettings path = path_;
    path.mtu = std::min(path_.mtu, static_cast<ibv_mtu>(remote.mtu));  // the smaller of the two ports' MTUs
    path.use_grh = std::memcmp(remote.gid, address_.gid, 8) != 0;      // another subnet: route by GID
    return path;
}

std::string PortTransport::ready_tgt(ibv_qp *qp, std::uint32_t sender, const PortAddress &sender_address) {
    if (sender_address.node_index >= map_.node_count() || my_node_ >= sender_address.ini_qp_by_node.size())
        return "rank " + std::to_string(sender) + " published an address for a different node layout";
    const PathSettings path = path_toward(sender_address);
    const std::uint32_t ini_qpn = sender_address.ini_qp_by_node[my_node_];
    const RemoteQp ini{sender_address.lid, gid_of(sender_address), ini_qpn, initial_psn(ini_qpn)};
    // Several local ranks may race to ready the same shared TGT QP; whoever loses finds it ready.
    if (query_state(qp) == IBV_QPS_INIT && modify(qp, tgt_to_rtr(path, ini)) != 0 && query_state(qp) == IBV_QPS_INIT)
        return errno_text("XRC TGT QP INIT->RTR for rank " + std::to_string(sender));
    if (query_state(qp) == IBV_QPS_RTR && modify(qp, tgt_to_rts(path, initial_psn(qp->qp_num))) != 0 &&
        query_state(qp) == IBV_QPS_RTR)
        return errno_text("XRC TGT QP RTR->RTS for rank " + std::to_string(sender));
    return {};
}

std::string PortTransport::bring_up_owned_tgts(const AddressLookup &lookup) {
    for (auto &[sender, qp] : owned_tgts_) {
        const PortAddress *addr = lookup(sender);
        if (addr == nullptr) return "no address of rank " + std::to_string(sender) + " for port " + device_->name;
        if (auto why = ready_tgt(qp.get(), sender, *addr); !why.empty()) return why;
        connection_opened();
    }
    return {};
}

std::string PortTransport::ready_ini(std::uint32_t node, const AddressLookup &lookup) {
    const std::uint32_t owner = map_.tgt_owner(my_rank_, node);
    const PortAddress *owner_address = lookup(owner);
    if (owner_address == nullptr) return "no address of rank " + std::to_string(owner);
    const TgtEntry *tgt = find_tgt(*owner_address, my_rank_);
    if (tgt == nullptr)
        return "rank " + std::to_string(owner) + " on " + map_.node_name(node) + " has no TGT QP for this process";
    const PathSettings path = path_toward(*owner_address);
    ibv_qp *qp = ini_qps_[node].get();
    const RemoteQp remote{owner_address->lid, gid_of(*owner_address), tgt->qp_num, initial_psn(tgt->qp_num)};
    if (modify(qp, ini_to_rtr(path, remote)) != 0)
        return errno_text("XRC send QP INIT->RTR toward " + map_.node_name(node));
    if (modify(qp, ini_to_rts(path, initial_psn(qp->qp_num))) != 0)
        return errno_text("XRC send QP RTR->RTS toward " + map_.node_name(node));
    ini_ready_[node] = true;
    connection_opened();
    return {};
}

ibv_qp *PortTransport::tgt_handle_for(std::uint32_t sender, const AddressLookup &lookup, std::string &error) {
    if (auto it = owned_tgts_.find(sender); it != owned_tgts_.end()) return it->second.get();
    if (auto it = opened_tgts_.find(sender); it != opened_tgts_.end()) return it->second.get();
    const std::uint32_t owner = map_.tgt_owner(sender, my_node_);
    const PortAddress *owner_address = lookup(owner);
    const TgtEntry *tgt = owner_address != nullptr ? find_tgt(*owner_address, sender) : nullptr;
    if (tgt == nullptr) {
        error = "local rank " + std::to_string(owner) + " published no TGT QP for rank " + std::to_string(sender);
        return nullptr;
    }
    ibv_qp_open_attr attr{};
    attr.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    attr.qp_num = tgt->qp_num;
    attr.xrcd = domain_->get();
    attr.qp_type = IBV_QPT_XRC_RECV;
    QpPtr qp(ibv_open_qp(device_->context.get(), &attr));
    if (!qp) {
        error = errno_text("ibv_open_qp of the TGT QP for rank " + std::to_string(sender));
        return nullptr;
    }
    ibv_qp *raw = qp.get();
    opened_tgts_.emplace(sender, std::move(qp));
    connection_opened();
    return raw;
}

std::string PortTransport::connect(std::uint32_t peer_rank, const AddressLookup &lookup, PeerRoute &route) {
    const PortAddress *peer = lookup(peer_rank);
    if (peer == nullptr) return "no address of rank " + std::to_string(peer_rank);
    const std::uint32_t node = map_.node_of(peer_rank);
    if (peer->node_index != node)
        return "rank " + std::to_string(peer_rank) + " says it runs on node " + std::to_string(peer->node_index) +
               ", the job's node map says " + std::to_string(node);
    route.srqs = peer->srqs;
    route.rank = peer_rank;
    if (node == my_node_) {
        route.queue = send_queues_[my_node_].get();  // null until on-node traffic needs it (loopback_queue)
        return {};
    }
    if (!ini_ready_[node]) {
        if (auto why = ready_ini(node, lookup); !why.empty()) return why;
    }
    // Receive side: hold our own handle on the TGT QP through which this peer reaches us.
    std::string error;
    ibv_qp *tgt = tgt_handle_for(peer_rank, lookup, error);
    if (tgt == nullptr) return error;
    if (auto why = ready_tgt(tgt, peer_rank, *peer); !why.empty()) return why;
    route.queue = send_queues_[node].get();
    return {};
}

}  // namespace xrc
