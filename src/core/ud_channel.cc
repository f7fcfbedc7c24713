// SPDX-License-Identifier: BSD-3-Clause
#include "ud_channel.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace xrc {
namespace {

int modify(ibv_qp *qp, const QpTransition &t) noexcept {
    auto attr = t.attr;
    return ibv_modify_qp(qp, &attr, t.mask);
}

}  // namespace

Result<std::unique_ptr<UdChannel>> UdChannel::make(ibv_pd *pd, ibv_cq *cq, const PathSettings &path, std::uint32_t qkey,
                                                   std::uint32_t receives) {
    std::unique_ptr<UdChannel> channel(new UdChannel(pd, path, receives));
    if (auto opened = channel->open(cq, qkey); !opened) return std::move(opened).error();
    return channel;
}

// The buffers, their registration, the QP readied, every receive posted; the destructor undoes whatever of it was
// done.
Result<void> UdChannel::open(ibv_cq *cq, std::uint32_t qkey) {
    ibv_pd *pd = pd_;
    bytes_ = std::size_t(receives_ + kSendSlots) * kBufferSize;
    void *memory = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
        bytes_ = 0;
        return Error(ErrorKind::resource, "cannot allocate the connection manager's buffers");
    }
    memory_ = static_cast<std::uint8_t *>(memory);
    mr_.reset(ibv_reg_mr(pd, memory_, bytes_, IBV_ACCESS_LOCAL_WRITE));
    if (!mr_) {
        return Error::from_errno("registering the connection manager's buffers");
    }
    ibv_qp_init_attr attr{};
    attr.qp_type = IBV_QPT_UD;
    attr.send_cq = cq;
    attr.recv_cq = cq;
    attr.cap.max_send_wr = kSendSlots;
    attr.cap.max_recv_wr = receives_;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    qp_.reset(ibv_create_qp(pd, &attr));
    if (!qp_) {
        return Error::from_errno("creating the connection manager's UD QP");
    }
    if (modify(qp_.get(), ud_to_init(path_, qkey)) != 0 || modify(qp_.get(), ud_to_rtr()) != 0 ||
        modify(qp_.get(), ud_to_rts(initial_psn(qp_->qp_num))) != 0) {
        return Error::from_errno("readying the connection manager's UD QP");
    }
    for (std::uint32_t i = 0; i < receives_; ++i)
        if (!post_receive(i)) return Error::from_errno("posting the connection manager's receives");
    for (std::uint32_t i = kSendSlots; i-- > 0;) free_slots_.push_back(i);
    return {};
}

UdChannel::~UdChannel() {
    qp_.reset();  // before its address handles, buffers and their registration
    by_lid_.clear();
    by_gid_.clear();
    mr_.reset();
    if (memory_ != nullptr) munmap(memory_, bytes_);
}

bool UdChannel::post_receive(std::uint32_t index) noexcept {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(memory_ + std::size_t(index) * kBufferSize), kBufferSize, mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = cm_wr_id(index, CompletionKind::cm_receive);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr *bad = nullptr;
    return ibv_post_recv(qp_.get(), &wr, &bad) == 0;
}

ibv_ah *UdChannel::address_handle(const PortAddress &to, bool use_grh) noexcept {
    ibv_ah_attr attr{};
    attr.dlid = to.lid;
    attr.sl = path_.service_level;
    attr.port_num = path_.port_num;
    if (use_grh) {
        std::array<std::uint8_t, 16> gid;
        std::memcpy(gid.data(), to.gid, gid.size());
        if (auto it = by_gid_.find(gid); it != by_gid_.end()) return it->second.get();
        attr.is_global = 1;
        std::memcpy(attr.grh.dgid.raw, to.gid, sizeof(to.gid));
        attr.grh.sgid_index = path_.gid_index;
        attr.grh.hop_limit = 255;
        AhPtr ah(ibv_create_ah(pd_, &attr));
        ibv_ah *raw = ah.get();
        if (raw != nullptr) by_gid_.emplace(gid, std::move(ah));
        return raw;
    }
    if (auto it = by_lid_.find(to.lid); it != by_lid_.end()) return it->second.get();
    AhPtr ah(ibv_create_ah(pd_, &attr));
    ibv_ah *raw = ah.get();
    if (raw != nullptr) by_lid_.emplace(to.lid, std::move(ah));
    return raw;
}

bool UdChannel::send(const PortAddress &to, std::span<const std::uint8_t> bytes, bool use_grh) noexcept {
    std::lock_guard<std::mutex> g(send_mutex_);
    if (!qp_ || free_slots_.empty() || bytes.size() > kBufferSize) return false;
    ibv_ah *ah = address_handle(to, use_grh);
    if (ah == nullptr) return false;
    const std::uint32_t slot = free_slots_.back();
    std::uint8_t *buffer = memory_ + std::size_t(receives_ + slot) * kBufferSize;
    std::memcpy(buffer, bytes.data(), bytes.size());
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buffer), static_cast<std::uint32_t>(bytes.size()), mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = cm_wr_id(slot, CompletionKind::cm_send);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = to.cm_qpn;
    wr.wr.ud.remote_qkey = cm_qkey(to.token);
    ibv_send_wr *bad = nullptr;
    if (ibv_post_send(qp_.get(), &wr, &bad) != 0) return false;
    free_slots_.pop_back();
    return true;
}

void UdChannel::complete(const ibv_wc &wc, const DatagramFn &on_datagram) noexcept {
    const std::uint32_t index = cm_wr_index(wc.wr_id);
    if (completion_kind(wc.wr_id) == CompletionKind::cm_send) {
        std::lock_guard<std::mutex> g(send_mutex_);
        if (index < kSendSlots) free_slots_.push_back(index);
        return;
    }
    if (index >= receives_) return;
    if (wc.status == IBV_WC_SUCCESS && wc.byte_len >= kGrhBytes) {
        const std::uint8_t *data = memory_ + std::size_t(index) * kBufferSize + kGrhBytes;
        on_datagram(std::span<const std::uint8_t>(data, wc.byte_len - kGrhBytes), static_cast<std::uint16_t>(wc.slid),
                    wc.src_qp);
    }
    if (wc.status != IBV_WC_WR_FLUSH_ERR) (void)post_receive(index);
}

}  // namespace xrc
