// SPDX-License-Identifier: BSD-3-Clause
// The synchronous "endpoint" API: rdma_getaddrinfo / rdma_freeaddrinfo, rdma_create_ep / rdma_destroy_ep,
// rdma_get_request. An endpoint is an id without a channel (sync): every call waits for its own event.
#include "cm.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <netdb.h>

namespace simhca_cm {
namespace {

sockaddr *copy_addr(const sockaddr *a, socklen_t len) noexcept
{
    auto *p = static_cast<sockaddr *>(calloc(1, sizeof(sockaddr_storage)));
    if (p)
        memcpy(p, a, std::min<size_t>(len, sizeof(sockaddr_storage)));
    return p;
}

int resolve(const char *node, const char *service, int family, int passive, sockaddr_storage &out,
            socklen_t &len) noexcept
{
    addrinfo hints{};
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    addrinfo *res = nullptr;
    int rc = getaddrinfo(node, service, &hints, &res);
    if (rc != 0)
        return rc == EAI_SYSTEM ? errno : (rc == EAI_NONAME ? ENODEV : EINVAL);
    len = res->ai_addrlen;
    memcpy(&out, res->ai_addr, len);
    freeaddrinfo(res);
    return 0;
}

} // namespace
} // namespace simhca_cm

using namespace simhca_cm;

extern "C" {

int rdma_getaddrinfo(const char *node, const char *service, const rdma_addrinfo *hints, rdma_addrinfo **res)
{
    // Without a node and a service the hints' addresses are the answer (pyverbs builds an AddrInfo with
    // only a source so); with neither, there is nothing to resolve.
    bool from_hints = !node && !service;
    if (!res || (from_hints && !(hints && (hints->ai_src_addr || hints->ai_dst_addr))))
        return fail(EINVAL);
    auto *ai = static_cast<rdma_addrinfo *>(calloc(1, sizeof(rdma_addrinfo)));
    if (!ai)
        return fail(ENOMEM);
    ai->ai_flags = hints ? hints->ai_flags : 0;
    ai->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
    ai->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type
                                                : (ai->ai_port_space == RDMA_PS_TCP ? IBV_QPT_RC : IBV_QPT_UD);
    int family = hints && (hints->ai_flags & RAI_FAMILY) ? hints->ai_family : AF_UNSPEC;
    if (from_hints) {
        if (hints->ai_src_addr) {
            ai->ai_src_addr = copy_addr(hints->ai_src_addr, hints->ai_src_len);
            ai->ai_src_len = hints->ai_src_len;
            ai->ai_family = hints->ai_src_addr->sa_family;
        }
        if (hints->ai_dst_addr) {
            ai->ai_dst_addr = copy_addr(hints->ai_dst_addr, hints->ai_dst_len);
            ai->ai_dst_len = hints->ai_dst_len;
            ai->ai_family = hints->ai_dst_addr->sa_family;
        }
        if ((ai->ai_src_len && !ai->ai_src_addr) || (ai->ai_dst_len && !ai->ai_dst_addr)) {
            rdma_freeaddrinfo(ai);
            return fail(ENOMEM);
        }
        *res = ai;
        return 0;
    }
    sockaddr_storage addr{};
    socklen_t len = 0;
    if (int err = resolve(node, service, family, ai->ai_flags & RAI_PASSIVE, addr, len)) {
        free(ai);
        return fail(err);
    }
    ai->ai_family = addr.ss_family;
    if (ai->ai_flags & RAI_PASSIVE) {
        ai->ai_src_addr = copy_addr(reinterpret_cast<sockaddr *>(&addr), len);
        ai->ai_src_len = len;
    } else {
        ai->ai_dst_addr = copy_addr(reinterpret_cast<sockaddr *>(&addr), len);
        ai->ai_dst_len = len;
        if (hints && hints->ai_src_addr && hints->ai_src_len) {
            ai->ai_src_addr = copy_addr(hints->ai_src_addr, hints->ai_src_len);
            ai->ai_src_len = hints->ai_src_len;
        }
    }
    if ((ai->ai_src_len && !ai->ai_src_addr) || (ai->ai_dst_len && !ai->ai_dst_addr)) {
        free(ai->ai_src_addr);
        free(ai->ai_dst_addr);
        free(ai);
        return fail(ENOMEM);
    }
    *res = ai;
    return 0;
}

void rdma_freeaddrinfo(rdma_addrinfo *res)
{
    while (res) {
        rdma_addrinfo *next = res->ai_next;
        free(res->ai_src_addr);
        free(res->ai_dst_addr);
        free(res->ai_src_canonname);
        free(res->ai_dst_canonname);
        free(res->ai_route);
        free(res->ai_connect);
        free(res);
        res = next;
    }
}

int rdma_create_ep(rdma_cm_id **id, rdma_addrinfo *res, ibv_pd *pd, ibv_qp_init_attr *qp_init_attr)
{
    if (!id || !res)
        return fail(EINVAL);
    rdma_cm_id *cid = nullptr;
    if (rdma_create_id(nullptr, &cid, nullptr, static_cast<rdma_port_space>(res->ai_port_space)))
        return -1;
    auto &p = *reinterpret_cast<Id *>(cid);
    // As librdmacm: the QP type comes from the address info (rdma_getaddrinfo sets it from the port space,
    // RC for TCP, UD for UDP), whatever the caller left in the attributes (rdma_client leaves 0).
    if (qp_init_attr)
        qp_init_attr->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
    int ret;
    if (res->ai_flags & RAI_PASSIVE) {
        ret = rdma_bind_addr(cid, res->ai_src_addr);
        if (ret == 0 && qp_init_attr) {
            // Each request's id gets this QP in rdma_get_request.
            std::lock_guard lk(global().mu);
            p.has_ep_qp_attr = true;
            p.ep_qp_attr = *qp_init_attr;
            p.ep_pd = pd;
        }
    } else {
        ret = rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000);
        if (ret == 0)
            ret = rdma_resolve_route(cid, 2000);
        if (ret == 0 && qp_init_attr)
            ret = rdma_create_qp(cid, pd, qp_init_attr);
    }
    if (ret) {
        int err = errno;
        rdma_destroy_ep(cid);
        return fail(err);
    }
    *id = cid;
    return 0;
}

void rdma_destroy_ep(rdma_cm_id *id)
{
    if (!id)
        return;
    if (id->qp)
        rdma_destroy_qp(id);
    if (id->srq)
        rdma_destroy_srq(id);
    rdma_destroy_id(id);
}

int rdma_get_request(rdma_cm_id *listen, rdma_cm_id **id)
{
    if (!listen || !id)
        return fail(EINVAL);
    auto &l = *reinterpret_cast<Id *>(listen);
    rdma_cm_event *ev = nullptr;
    {
        std::unique_lock lk(global().mu);
        if (!l.sync || l.state != State::Listening)
            return fail(EINVAL);
    }
    for (;;) {
        if (rdma_get_cm_event(listen->channel, &ev))
            return -1;
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
            break;
        rdma_ack_cm_event(ev); // anything else on a listener is of no interest here
    }
    rdma_cm_id *child = ev->id;
    auto &c = *reinterpret_cast<Id *>(child);
    if (l.has_ep_qp_attr) {
        ibv_qp_init_attr attr = l.ep_qp_attr;
        if (rdma_create_qp(child, l.ep_pd, &attr)) {
            int err = errno;
            rdma_ack_cm_event(ev);
            rdma_reject(child, nullptr, 0);
            rdma_destroy_id(child);
            return fail(err);
        }
    }
    // The request stays readable through child->event until accept, reject or destroy acks it.
    {
        std::lock_guard lk(global().mu);
        c.pub.event = ev;
    }
    *id = child;
    return 0;
}

} // extern "C"
