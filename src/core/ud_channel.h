// SPDX-License-Identifier: BSD-3-Clause
// The connection manager's datagram endpoint on one port: a UD QP on the port's CQ, its receive buffers and send
// slots (one registered block), and an address handle per remote port it has sent to. Work request ids carry
// kind tags (completion_kind.h) so that the port's one completion loop can hand these completions here.
// Memory: receives * 128 + 64 * 64 bytes, registered once; address handles O(remote ports contacted).
// Threads: send() and complete() may be called from different threads (the connection manager's service thread
// and progress); the send slots and address handles have their own mutex, taken by nothing else.
#pragma once

#include "address.h"
#include "completion_kind.h"
#include "qp_attr.h"
#include "result.h"
#include "verbs_owners.h"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace xrc {

class UdChannel {
public:
    using DatagramFn = std::function<void(std::span<const std::uint8_t>, std::uint16_t slid, std::uint32_t src_qp)>;

    // `qkey`: this process's Q_Key (from its token). `receives`: datagrams it can hold before it drops new ones.
    static Result<std::unique_ptr<UdChannel>> make(ibv_pd *pd, ibv_cq *cq, const PathSettings &path, std::uint32_t qkey,
                                                   std::uint32_t receives);
    UdChannel(const UdChannel &) = delete;
    UdChannel &operator=(const UdChannel &) = delete;
    ~UdChannel();

    std::uint32_t qpn() const noexcept { return qp_ ? qp_->qp_num : 0; }

    // One datagram to the connection manager at `to` (`use_grh`: the peer is in another subnet). False when it
    // could not be posted (no free send slot, no address handle): it is lost, like a datagram on the wire.
    bool send(const PortAddress &to, std::span<const std::uint8_t> bytes, bool use_grh) noexcept;
    // A completion tagged CompletionKind::cm_*: a datagram (handed to `on_datagram`, then its buffer reposted),
    // or a finished send (its slot is free again).
    void complete(const ibv_wc &wc, const DatagramFn &on_datagram) noexcept;

private:
    static constexpr std::uint32_t kSendSlots = 64;
    static constexpr std::uint32_t kBufferSize = 128;  // 40 bytes of GRH, then the datagram
    static constexpr std::uint32_t kGrhBytes = 40;

    UdChannel(ibv_pd *pd, const PathSettings &path, std::uint32_t receives) noexcept
        : pd_(pd), path_(path), receives_(receives) {}
    Result<void> open(ibv_cq *cq, std::uint32_t qkey);
    bool post_receive(std::uint32_t index) noexcept;
    ibv_ah *address_handle(const PortAddress &to, bool use_grh) noexcept;

    ibv_pd *pd_;
    PathSettings path_;
    std::uint32_t receives_;
    std::uint8_t *memory_ = nullptr;
    std::size_t bytes_ = 0;
    MrPtr mr_;
    QpPtr qp_;
    std::mutex send_mutex_;  // free_slots_, by_lid_, by_gid_
    std::vector<std::uint32_t> free_slots_;
    std::map<std::uint16_t, AhPtr> by_lid_;
    std::map<std::array<std::uint8_t, 16>, AhPtr> by_gid_;
};

}  // namespace xrc
