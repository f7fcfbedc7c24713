// SPDX-License-Identifier: BSD-3-Clause
// Event channels and events: rdma_create/destroy_event_channel, rdma_get_cm_event, rdma_ack_cm_event,
// rdma_event_str. Every event is produced inside this process (by an API call or by the CM thread), so
// waiting is a condition variable; the socketpair byte per event only makes channel->fd pollable.
#include "cm.hpp"

#include <cerrno>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace simhca_cm {

Global &global() noexcept
{
    // Never destroyed: the CM thread is detached and may still wake (a peer closing its socket) while
    // exit() runs the static destructors; a destroyed mutex and id list there crash the exiting process.
    static Global *g = new Global;
    return *g;
}

Channel *new_channel() noexcept
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return nullptr;
    auto *ch = new (std::nothrow) Channel;
    if (!ch) {
        close(sv[0]);
        close(sv[1]);
        errno = ENOMEM;
        return nullptr;
    }
    ch->pub.fd = sv[0];
    ch->writer = sv[1];
    return ch;
}

void free_channel(Channel *ch) noexcept
{
    if (!ch)
        return;
    close(ch->pub.fd);
    close(ch->writer);
    delete ch;
}

std::unique_ptr<Event> make_event(Id &id, rdma_cm_event_type type, int status) noexcept
{
    auto ev = std::unique_ptr<Event>(new (std::nothrow) Event);
    if (!ev)
        return ev;
    ev->ev.id = &id.pub;
    ev->ev.event = type;
    ev->ev.status = status;
    ev->owner = &id;
    return ev;
}

void queue_event(Channel &ch, std::unique_ptr<Event> ev) noexcept
{
    if (!ev)
        return;
    // Point the C view at our copy of the private data (the vector no longer moves).
    if (!ev->private_data.empty()) {
        ev->ev.param.conn.private_data = ev->private_data.data();
        ev->ev.param.conn.private_data_len = static_cast<uint8_t>(ev->private_data.size());
    }
    ch.queue.push_back(std::move(ev));
    char one = 1;
    (void)!send(ch.writer, &one, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    global().cv.notify_all();
}

namespace {
void consume_byte(Channel &ch) noexcept
{
    char b;
    (void)!recv(ch.pub.fd, &b, 1, MSG_DONTWAIT);
}

std::unique_ptr<Event> pop(Channel &ch) noexcept
{
    auto ev = std::move(ch.queue.front());
    ch.queue.pop_front();
    consume_byte(ch);
    ev->owner->events_out++;
    ev->owner->handed_out = true;
    return ev;
}
} // namespace

void drop_events_of(Id &id) noexcept
{
    // Events not yet retrieved die with their id, as the kernel frees them when the id is destroyed.
    auto &g = global();
    for (Id *other : g.ids) {
        Channel *ch = other->channel;
        if (!ch)
            continue;
        for (auto it = ch->queue.begin(); it != ch->queue.end();) {
            if ((*it)->owner == &id) {
                it = ch->queue.erase(it);
                consume_byte(*ch);
            } else {
                ++it;
            }
        }
    }
}

static bool is_error_event(rdma_cm_event_type t) noexcept
{
    return t == RDMA_CM_EVENT_ADDR_ERROR || t == RDMA_CM_EVENT_ROUTE_ERROR || t == RDMA_CM_EVENT_CONNECT_ERROR ||
           t == RDMA_CM_EVENT_UNREACHABLE || t == RDMA_CM_EVENT_REJECTED || t == RDMA_CM_EVENT_MULTICAST_ERROR ||
           t == RDMA_CM_EVENT_DEVICE_REMOVAL;
}

static void release(Event *ev) noexcept
{
    ev->owner->events_out--;
    delete ev;
    global().cv.notify_all();
}

int complete_sync(std::unique_lock<std::mutex> &lk, Id &id) noexcept
{
    auto &g = global();
    if (id.pub.event) {
        release(reinterpret_cast<Event *>(id.pub.event));
        id.pub.event = nullptr;
    }
    g.cv.wait(lk, [&] { return !id.channel->queue.empty(); });
    Event *ev = pop(*id.channel).release();
    id.pub.event = &ev->ev;
    if (ev->ev.status || is_error_event(ev->ev.event)) {
        if (ev->ev.event == RDMA_CM_EVENT_REJECTED)
            return fail(ECONNREFUSED);
        int st = ev->ev.status < 0 ? -ev->ev.status : ev->ev.status;
        return fail(st ? st : ECONNREFUSED);
    }
    return 0;
}

} // namespace simhca_cm

using namespace simhca_cm;

extern "C" {

rdma_event_channel *rdma_create_event_channel(void)
{
    Channel *ch = new_channel();
    return ch ? &ch->pub : nullptr;
}

void rdma_destroy_event_channel(rdma_event_channel *channel)
{
    // The caller destroyed every id and acked every event first (documented precondition).
    free_channel(reinterpret_cast<Channel *>(channel));
}

int rdma_get_cm_event(rdma_event_channel *channel, rdma_cm_event **event)
{
    if (!channel || !event)
        return fail(EINVAL);
    auto &ch = *reinterpret_cast<Channel *>(channel);
    auto &g = global();
    std::unique_lock lk(g.mu);
    if (ch.queue.empty()) {
        int fl = fcntl(ch.pub.fd, F_GETFL);
        if (fl >= 0 && (fl & O_NONBLOCK))
            return fail(EAGAIN);
        g.cv.wait(lk, [&] { return !ch.queue.empty(); });
    }
    *event = &pop(ch).release()->ev;
    return 0;
}

int rdma_ack_cm_event(rdma_cm_event *event)
{
    if (!event)
        return fail(EINVAL);
    std::lock_guard lk(global().mu);
    release(reinterpret_cast<Event *>(event));
    return 0;
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
    switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
    }
    return "UNKNOWN EVENT";
}

} // extern "C"
