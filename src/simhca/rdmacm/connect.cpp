// SPDX-License-Identifier: BSD-3-Clause
// Connection management calls: rdma_listen, rdma_connect, rdma_accept, rdma_reject(_ece), rdma_establish,
// rdma_disconnect, rdma_notify, and rdma_destroy_id. They send the exchange's frames (wire.hpp) themselves;
// the answers arrive through the CM thread (cm_thread.cpp).
#include "cm.hpp"
#include "wire.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

namespace simhca_cm {

int send_msg(Id &id, WireMsg &m) noexcept;
void fill_local(Id &id, WireMsg &m, MsgType type) noexcept;
void close_sock(Id &id) noexcept;

namespace {

// librdmacm's defaults for a NULL conn_param: the device's limits, 7 retries.
void set_conn_param(Id &id, const rdma_conn_param *p) noexcept
{
    auto &g = global();
    id.my_conn = {};
    if (p) {
        id.my_conn = *p;
        id.my_private.assign(static_cast<const uint8_t *>(p->private_data),
                             static_cast<const uint8_t *>(p->private_data) + (p->private_data ? p->private_data_len : 0));
        id.my_conn.responder_resources = std::min(p->responder_resources, g.max_rd_atomic);
        id.my_conn.initiator_depth = std::min(p->initiator_depth, g.max_rd_atomic);
    } else {
        id.my_private.clear();
        id.my_conn.responder_resources = g.max_rd_atomic;
        id.my_conn.initiator_depth = g.max_rd_atomic;
        id.my_conn.retry_count = 7;
        id.my_conn.rnr_retry_count = 7;
    }
    id.my_conn.private_data = nullptr;
}

} // namespace

int destroy_locked(Id *id, std::unique_lock<std::mutex> &lk) noexcept
{
    auto &g = global();
    if (id->state == State::Connected && connected_ps(*id)) {
        WireMsg m{};
        fill_local(*id, m, MsgType::Dreq);
        send_msg(*id, m);
    } else if (id->state == State::ReqReceived) {
        send_reject(*id, nullptr, 0, kRejConsumerDefined);
    }
    id->state = State::Destroying;
    close_sock(*id);
    for (auto &mc : id->mcast)
        if (mc.attached && id->pub.qp)
            ibv_detach_mcast(id->pub.qp, &mc.mgid, mc.mlid);
    id->mcast.clear();
    if (id->sync && id->pub.event) {
        auto *ev = reinterpret_cast<Event *>(id->pub.event);
        id->pub.event = nullptr;
        ev->owner->events_out--;
        delete ev;
    }
    drop_events_of(*id);
    // A listener's requests that nobody retrieved die with it (the kernel rejects them); requests already
    // handed out belong to the application now.
    std::vector<Id *> orphans;
    for (Id *other : g.ids) {
        if (other->listener != id)
            continue;
        if (!other->handed_out)
            orphans.push_back(other);
        else
            other->listener = nullptr;
    }
    // Events of the listener's requests sit on the listener's channel with the child as owner.
    for (Id *o : orphans) {
        drop_events_of(*o);
        if (o->state == State::ReqReceived)
            send_reject(*o, nullptr, 0, kRejConsumerDefined);
        close_sock(*o);
        g.ids.remove(o);
        if (o->sync)
            free_channel(o->channel);
        delete o;
    }
    // As librdmacm: wait until every event reported on the id was acked.
    g.cv.wait(lk, [&] { return id->events_out == 0; });
    g.ids.remove(id);
    if (id->sync)
        free_channel(id->channel);
    delete id;
    return 0;
}

} // namespace simhca_cm

using namespace simhca_cm;

extern "C" {

int rdma_listen(rdma_cm_id *cid, int backlog)
{
    if (!cid)
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    std::lock_guard lk(global().mu);
    if (id.state == State::Idle) {
        // Listening without a bind listens on every address, on a port the kernel picks.
        sockaddr_in any{};
        any.sin_family = AF_INET;
        if (int err = bind_id(id, reinterpret_cast<sockaddr *>(&any)))
            return fail(err);
    }
    if (id.state != State::Bound)
        return fail(EINVAL);
    if (listen(id.sock, backlog > 0 ? backlog : 128) != 0)
        return fail(errno);
    id.state = State::Listening;
    if (int err = watch(id, false))
        return fail(err);
    return 0;
}

int rdma_connect(rdma_cm_id *cid, rdma_conn_param *conn_param)
{
    if (!cid)
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    std::unique_lock lk(global().mu);
    if (id.state != State::RouteResolved)
        return fail(EINVAL);
    unsigned max_private = connected_ps(id) ? kReqPrivate : kSidrReqPrivate;
    if (conn_param && conn_param->private_data && conn_param->private_data_len > max_private)
        return fail(EINVAL);
    if (!id.pub.qp && !conn_param)
        return fail(EINVAL); // without a QP on the id the caller must name its QP
    set_conn_param(id, conn_param);
    // The IB CM gives up on an unanswered REQ after its retries (about a minute); TCP's default SYN
    // retries take twice that. Five SYN retries end after about 63 s.
    int syncnt = 5;
    setsockopt(id.sock, IPPROTO_TCP, TCP_SYNCNT, &syncnt, sizeof(syncnt));
    if (connect(id.sock, &id.pub.route.addr.dst_addr, addr_len(&id.pub.route.addr.dst_addr)) != 0 &&
        errno != EINPROGRESS) {
        // Nobody listens on that port (or the address is unreachable): the reply the CM would get.
        report_connect_failure(id, errno);
    } else {
        id.state = State::Connecting;
        id.connecting_tcp = true;
        if (int err = watch(id, true))
            return fail(err);
    }
    return id.sync ? complete_sync(lk, id) : 0;
}

int rdma_accept(rdma_cm_id *cid, rdma_conn_param *conn_param)
{
    if (!cid)
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    std::unique_lock lk(global().mu);
    if (id.state != State::ReqReceived)
        return fail(EINVAL);
    bool rc = connected_ps(id);
    if (conn_param && conn_param->private_data && conn_param->private_data_len > (rc ? kRepPrivate : kSidrRepPrivate))
        return fail(EINVAL);
    if (!id.pub.qp && !conn_param)
        return fail(EINVAL);
    set_conn_param(id, conn_param);
    if (conn_param)
        id.my_conn.retry_count = id.peer.retry_count; // ignored when accepting: the requester's count rules
    if (rc && id.pub.qp) {
        int err = qp_to_rtr(id, id.pub.qp);
        if (!err)
            err = qp_to_rts(id, id.pub.qp);
        if (err) {
            send_reject(id, nullptr, 0, kRejConsumerDefined);
            return fail(err);
        }
    }
    WireMsg m{};
    fill_local(id, m, MsgType::Rep);
    if (int err = send_msg(id, m)) {
        close_sock(id);
        id.state = State::Disconnected;
        return fail(err);
    }
    if (!rc) {
        // SIDR: the REP ends the exchange; no ESTABLISHED on the passive side.
        close_sock(id);
        id.state = State::Connected;
        return 0;
    }
    id.state = State::Accepted;
    return id.sync ? complete_sync(lk, id) : 0;
}

namespace {
// Both rejects: `rc_reason` is what a connected (RC) requester is told; a UD (SIDR) requester gets kSidrReject.
int reject_request(rdma_cm_id *cid, const void *private_data, uint8_t private_data_len, int rc_reason)
{
    if (!cid)
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    std::lock_guard lk(global().mu);
    if (id.state != State::ReqReceived)
        return fail(EINVAL);
    if (private_data_len > kRejPrivate)
        return fail(EINVAL);
    int err = send_reject(id, private_data, private_data_len, connected_ps(id) ? rc_reason : kSidrReject);
    return err ? fail(ECONNREFUSED) : 0;
}
} // namespace

int rdma_reject_ece(rdma_cm_id *cid, const void *private_data, uint8_t private_data_len)
{
    return reject_request(cid, private_data, private_data_len, kRejVendorOptionNotSupported);
}

int rdma_reject(rdma_cm_id *cid, const void *private_data, uint8_t private_data_len)
{
    return reject_request(cid, private_data, private_data_len, kRejConsumerDefined);
}

int rdma_establish(rdma_cm_id *cid)
{
    if (!cid)
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    std::lock_guard lk(global().mu);
    if (id.state != State::RepReceived || id.pub.qp)
        return fail(EINVAL);
    WireMsg m{};
    fill_local(id, m, MsgType::Rtu);
    if (int err = send_msg(id, m))
        return fail(err);
    id.state = State::Connected;
    return 0;
}

int rdma_disconnect(rdma_cm_id *cid)
{
    if (!cid)
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    std::lock_guard lk(global().mu);
    switch (id.state) {
    case State::Connected:
    case State::RepReceived:
    case State::Accepted: {
        // librdmacm moves the QP to ERR first (IB transport), flushing what is posted.
        if (id.pub.qp)
            qp_to_err(id.pub.qp);
        WireMsg m{};
        fill_local(id, m, MsgType::Dreq);
        send_msg(id, m);
        close_sock(id);
        id.state = State::Disconnected;
        queue_event(*id.channel, make_event(id, RDMA_CM_EVENT_DISCONNECTED));
        return 0;
    }
    case State::Disconnected:
        // The peer disconnected first (its DREQ was already reported): answering it is all that is left.
        if (id.pub.qp)
            qp_to_err(id.pub.qp);
        return 0;
    default:
        return fail(EINVAL);
    }
}

int rdma_notify(rdma_cm_id *cid, enum ibv_event_type event)
{
    if (!cid)
        return fail(EINVAL);
    auto &id = *reinterpret_cast<Id *>(cid);
    std::lock_guard lk(global().mu);
    if (event == IBV_EVENT_COMM_EST) {
        // Data arrived before the RTU: the connection is established (the IB CM's rule).
        if (id.state == State::Accepted) {
            id.state = State::Connected;
            queue_event(*id.channel, make_event(id, RDMA_CM_EVENT_ESTABLISHED));
        }
        return 0;
    }
    if (event == IBV_EVENT_PATH_MIG)
        return 0;
    return fail(EINVAL);
}

int rdma_get_remote_ece(rdma_cm_id *cid, ibv_ece *ece)
{
    if (!cid || !ece)
        return fail(EINVAL);
    std::lock_guard lk(global().mu);
    *ece = reinterpret_cast<Id *>(cid)->remote_ece; // ECE is not negotiated by our HCA: zeros
    return 0;
}

int rdma_set_local_ece(rdma_cm_id *cid, ibv_ece *ece)
{
    if (!cid || !ece)
        return fail(EINVAL);
    std::lock_guard lk(global().mu);
    reinterpret_cast<Id *>(cid)->local_ece = *ece;
    return 0;
}

} // extern "C"
