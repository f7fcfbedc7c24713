// SPDX-License-Identifier: BSD-3-Clause
// Control verbs for PDs, MRs, completion channels, CQs, XRCDs and SRQs,
// plus client bookkeeping and uverbs-close style cleanup.
#include <algorithm>
#include <random>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/limits.hpp"
#include "clock.hpp"
#include "device.hpp"
#include "dma.hpp"

namespace simhca {

using namespace proto;

Device::Device(DeviceConfig c) : objs_(std::move(c)) {
    const char *d = std::getenv("SIMHCA_DEBUG");
    debug_ = d && *d && *d != '0';
}
Device::~Device() {
    for (auto id : client_ids()) remove_client(id);
}

Client &Device::add_client(UniqueFd sock, pid_t pid, uid_t uid) {
    auto c = std::make_unique<Client>();
    c->id = objs_.new_id();
    c->sock = std::move(sock);
    c->pid = pid;
    c->uid = uid;
    Client &ref = *c;
    objs_.clients[ref.id] = std::move(c);
    return ref;
}

std::vector<uint32_t> Device::client_ids() const {
    std::vector<uint32_t> v;
    for (auto &[id, c] : objs_.clients) v.push_back(id);
    return v;
}

// Tear down in dependency order, like ib_uverbs_cleanup_ufile: QP handles
// (a TGT QP dies only with its last handle), SRQs, CQs, MRs, PDs, XRCDs.
void Device::remove_client(uint32_t client_id) {
    Client *c = objs_.client(client_id);
    if (!c) return;
    std::vector<uint32_t> ids;
    for (auto &[id, h] : objs_.qp_handles)
        if (h->owner == c) ids.push_back(id);
    for (auto id : ids) {
        Response r{};
        do_destroy_qp(*c, id, r);
    }
    ids.clear();
    for (auto &[id, s] : objs_.srqs)
        if (s->owner == c) ids.push_back(id);
    for (auto id : ids) destroy_srq_object(*objs_.srqs[id]);
    ids.clear();
    for (auto &[id, q] : objs_.cqs)
        if (q->owner == c) ids.push_back(id);
    for (auto id : ids) {
        Cq &cq = *objs_.cqs[id];
        if (cq.channel)
            if (auto it = objs_.channels.find(cq.channel); it != objs_.channels.end()) it->second->users--;
        objs_.cqs.erase(id);
    }
    ids.clear();
    for (auto &[id, w] : objs_.mws)
        if (w->owner == c) ids.push_back(id);
    for (auto id : ids) do_dealloc_mw(*c, id);
    ids.clear();
    for (auto &[id, m] : objs_.mrs)
        if (m->owner == c) ids.push_back(id);
    for (auto id : ids) {
        objs_.key_to_mr.erase(objs_.mrs[id]->key);
        objs_.mrs.erase(id);
    }
    for (auto it = objs_.dms.begin(); it != objs_.dms.end();) {
        if (it->second->owner == c) {
            objs_.dm_bytes -= it->second->length;
            it = objs_.dms.erase(it);
        } else {
            ++it;
        }
    }
    std::erase_if(objs_.pds, [c](auto &p) { return p.second->owner == c; });
    std::erase_if(objs_.channels, [c](auto &p) { return p.second->owner == c; });
    ids.clear();
    for (auto &[id, h] : objs_.xrcd_handles)
        if (h->owner == c) ids.push_back(id);
    for (auto id : ids) {
        uint32_t x = objs_.xrcd_handles[id]->xrcd;
        objs_.xrcd_handles.erase(id);
        xrcd_put(x);
    }
    objs_.clients.erase(client_id);
}

void Device::handle(Client &conn, const Request &req, const int *in_fds, Response &resp, std::vector<int> &fds) {
    std::memset(&resp, 0, offsetof(Response, raw) + 64);
    int err = 0;
    // The uverbs file is shared across fork(): a child may keep using its
    // parent's context. Its library opens its own connection and joins the
    // parent's client (secret from Hello, same uid); it then acts as that
    // client, whose objects live until the parent's connection closes.
    if (req.op == uint32_t(Op::Join)) {
        Client *t = objs_.client(req.join.client_id);
        if (!t || !t->secret || t->secret != req.join.secret || t->uid != conn.uid || t->alias_of || conn.async_wr)
            resp.err = EPERM;
        else
            conn.alias_of = t->id;
        return;
    }
    if (req.op == uint32_t(Op::ImportDevice)) {
        resp.err = do_import_device(conn, in_fds[0], resp, fds);
        // Only looked at: a copy kept here would keep the owner's socket open forever (no hang-up).
        if (in_fds[0] >= 0) ::close(in_fds[0]);
        return;
    }
    Client *idp = &conn;
    if (conn.alias_of && !(idp = objs_.client(conn.alias_of))) {
        resp.err = ENODEV;  // the parent's context is gone
        return;
    }
    Client &c = *idp;
    req_pid_ = conn.pid;  // an importer's or forked child's memory is its own
    if (req.op != uint32_t(Op::Hello) && req.op != uint32_t(Op::Status) && req.op != uint32_t(Op::ListObjects) &&
        req.op != uint32_t(Op::Fault) && req.op != uint32_t(Op::Probe) && !c.async_wr && !c.is_ctl) {
        resp.err = EPROTO;  // verbs before Hello
        return;
    }
    switch (Op(req.op)) {
        case Op::Hello:
            err = do_hello(c, resp, fds);
            break;
        case Op::QueryPort:
            resp.port.state = objs_.port_state;
            resp.port.lid = objs_.cfg.lid;
            resp.port.sm_lid = 1;
            break;
        case Op::AllocPd:
            err = do_alloc_pd(c, resp);
            break;
        case Op::DeallocPd:
            err = do_dealloc_pd(c, req.h.handle);
            break;
        case Op::RegMr:
            err = do_reg_mr(c, req.reg_mr, resp);
            break;
        case Op::DeregMr:
            err = do_dereg_mr(c, req.h.handle);
            break;
        case Op::ReregMr:
            err = do_rereg_mr(c, req.rereg_mr, resp);
            break;
        case Op::ResizeCq:
            err = do_resize_cq(c, req.resize_cq, resp, fds);
            break;
        case Op::AllocMw:
            err = do_alloc_mw(c, req.alloc_mw, resp);
            break;
        case Op::DeallocMw:
            err = do_dealloc_mw(c, req.h.handle);
            break;
        case Op::AllocDm:
            err = do_alloc_dm(c, req.alloc_dm, resp, fds);
            break;
        case Op::FreeDm:
            err = do_free_dm(c, req.h.handle);
            break;
        case Op::RegDmMr:
            err = do_reg_dm_mr(c, req.reg_dm_mr, resp);
            break;
        case Op::CreateChannel:
            err = do_create_channel(c, resp, fds);
            break;
        case Op::DestroyChannel:
            err = do_destroy_channel(c, req.h.handle);
            break;
        case Op::CreateCq:
            err = do_create_cq(c, req.create_cq, resp, fds);
            break;
        case Op::DestroyCq:
            err = do_destroy_cq(c, req.h.handle, resp);
            break;
        case Op::OpenXrcd:
            err = do_open_xrcd(c, req.open_xrcd, in_fds[0], resp);
            break;
        case Op::CloseXrcd:
            err = do_close_xrcd(c, req.h.handle);
            break;
        case Op::CreateSrq:
            err = do_create_srq(c, req.create_srq, resp, fds);
            break;
        case Op::TmOp:
            err = do_tm_op(c, req.tm_op, resp);
            break;
        case Op::ModifySrq:
            err = do_modify_srq(c, req.modify_srq, resp, fds);
            break;
        case Op::QuerySrq:
            err = do_query_srq(c, req.h.handle, resp);
            break;
        case Op::DestroySrq:
            err = do_destroy_srq(c, req.h.handle, resp);
            break;
        case Op::CreateQp:
            err = do_create_qp(c, req.create_qp, resp, fds);
            break;
        case Op::OpenQp:
            err = do_open_qp(c, req.open_qp, resp);
            break;
        case Op::ModifyQp:
            err = do_modify_qp(c, req.modify_qp);
            break;
        case Op::QueryQp:
            err = do_query_qp(c, req.h.handle, resp);
            break;
        case Op::DestroyQp:
            err = do_destroy_qp(c, req.h.handle, resp);
            break;
        case Op::Status:
            c.is_ctl = c.is_ctl || !c.async_wr;
            err = do_status(resp, false);
            break;
        case Op::ListObjects:
            c.is_ctl = c.is_ctl || !c.async_wr;
            err = do_status(resp, req.list.json != 0);
            break;
        case Op::Fault:
            c.is_ctl = c.is_ctl || !c.async_wr;
            err = do_fault(req.fault);
            break;
        case Op::AttachMcast:
            err = do_attach_mcast(c, req.mcast);
            break;
        case Op::DetachMcast:
            err = do_detach_mcast(c, req.mcast);
            break;
        case Op::ImportPd:
            err = do_import_pd(c, req.h.handle);
            break;
        case Op::ImportMr:
            err = do_import_mr(c, req.h.handle, resp);
            break;
        case Op::ImportDm:
            err = do_import_dm(c, req.h.handle, resp, fds);
            break;
        case Op::Kick:
            doorbells_.ring(c);
            break;
        case Op::Probe:
            c.is_ctl = c.is_ctl || !c.async_wr;
            resp.hello.lid = objs_.cfg.lid;
            resp.hello.port_state = objs_.port_state;
            resp.hello.node_guid = __builtin_bswap64(limits::node_guid_for_lid(objs_.cfg.lid));
            std::snprintf(resp.hello.node_name, sizeof(resp.hello.node_name), "%s", objs_.cfg.node.c_str());
            std::snprintf(resp.hello.sysfs_dir, sizeof(resp.hello.sysfs_dir), "%s", objs_.cfg.sysfs_dir.c_str());
            break;
        default:
            err = EOPNOTSUPP;
    }
    resp.err = err;
    if (err && debug_) {
        std::fprintf(stderr, "simhcad: pid %d op %u failed: %s", int(c.pid), req.op, std::strerror(err));
        if (Op(req.op) == Op::ModifyQp)
            std::fprintf(stderr, " (modify_qp mask 0x%x to state %d)", req.modify_qp.mask, req.modify_qp.attr.qp_state);
        std::fprintf(stderr, "\n");
    }
}

int Device::do_hello(Client &c, Response &r, std::vector<int> &fds) {
    if (c.async_wr) return EALREADY;
    if (int e = make_event_pipe(c)) return e;
    c.doorbell.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!c.doorbell) return errno;
    {
        std::random_device rd;  // unguessable by other local users
        c.secret = (uint64_t(rd()) << 32) ^ rd() ^ now_ns();
        if (!c.secret) c.secret = 1;
    }
    r.hello.client_id = c.id;
    r.hello.secret = c.secret;
    r.hello.lid = objs_.cfg.lid;
    r.hello.port_state = objs_.port_state;
    r.hello.node_guid = __builtin_bswap64(limits::node_guid_for_lid(objs_.cfg.lid));
    std::snprintf(r.hello.node_name, sizeof(r.hello.node_name), "%s", objs_.cfg.node.c_str());
    std::snprintf(r.hello.sysfs_dir, sizeof(r.hello.sysfs_dir), "%s", objs_.cfg.sysfs_dir.c_str());
    fds = {c.async_rd.get(), c.doorbell.get()};
    if (doorbells_.awake_fd() >= 0) fds.push_back(doorbells_.awake_fd());
    return 0;
}

int Device::do_alloc_pd(Client &c, Response &r) {
    if (objs_.pds.size() >= limits::kMaxPd) return ENOMEM;
    auto pd = std::make_unique<Pd>(Pd{objs_.new_id(), &c, 0});
    r.h.handle = pd->id;
    objs_.pds[pd->id] = std::move(pd);
    return 0;
}

int Device::do_dealloc_pd(Client &c, uint32_t h) {
    Pd *pd = objs_.owned(objs_.pds, c, h);
    if (!pd) return EINVAL;
    if (pd->users) return EBUSY;
    objs_.pds.erase(h);
    return 0;
}

// Access flags the kernel accepts; remote write/atomic need local write.
static bool access_ok(int access) {
    constexpr int kKnown = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                           IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING;
    if (access & ~kKnown) return false;
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
        return false;
    return true;
}

int Device::do_reg_mr(Client &c, const RegMrReq &q, Response &r) {
    Pd *pd = objs_.owned(objs_.pds, c, q.pd);
    if (!pd) return EINVAL;
    if (objs_.mrs.size() >= limits::kMaxMr) return ENOMEM;
    if (!access_ok(q.access)) return EINVAL;
    if (q.length == 0 || q.addr + q.length < q.addr) return EINVAL;
    // The kernel pins the pages and fails with EFAULT when they are not
    // mapped; we do not pin, but probe both ends of the range.
    // On-demand registrations (implicit ones cover the whole address space)
    // are checked page by page when used, like ODP.
    uint8_t probe;
    if (!(q.access & IBV_ACCESS_ON_DEMAND) &&
        (dma_read(req_pid_, q.addr, &probe, 1) || dma_read(req_pid_, q.addr + q.length - 1, &probe, 1)))
        return EFAULT;
    auto mr = std::make_unique<Mr>();
    mr->id = objs_.new_id();
    mr->owner = &c;
    mr->pid = req_pid_;
    mr->pd = q.pd;
    mr->addr = q.addr;
    mr->length = q.length;
    mr->iova = q.iova;
    mr->access = q.access;
    mr->key = objs_.new_key();
    r.reg_mr = {mr->id, mr->key, mr->key};
    objs_.key_to_mr[mr->key] = mr->id;
    pd->users++;
    objs_.mrs[mr->id] = std::move(mr);
    return 0;
}

int Device::do_dereg_mr(Client &c, uint32_t h) {
    Mr *mr = objs_.owned(objs_.mrs, c, h);
    if (!mr) return EINVAL;
    if (mr->windows) return EBUSY;  // memory windows are bound to it
    if (auto it = objs_.pds.find(mr->pd); it != objs_.pds.end()) it->second->users--;
    if (mr->dm)
        if (auto it = objs_.dms.find(mr->dm); it != objs_.dms.end()) it->second->users--;
    objs_.key_to_mr.erase(mr->key);
    objs_.mrs.erase(h);
    return 0;
}

// Re-registration keeps the handle and the keys (peers may hold the rkey).
int Device::do_rereg_mr(Client &c, const ReregMrReq &q, Response &r) {
    Mr *mr = objs_.owned(objs_.mrs, c, q.handle);
    if (!mr) return EINVAL;
    if (q.flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) return EINVAL;
    Pd *npd = nullptr;
    if (q.flags & IBV_REREG_MR_CHANGE_PD) {
        npd = objs_.owned(objs_.pds, c, q.pd);
        if (!npd) return EINVAL;
    }
    if ((q.flags & IBV_REREG_MR_CHANGE_ACCESS) && !access_ok(q.access)) return EINVAL;
    if ((q.flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (q.length == 0 || q.addr + q.length < q.addr)) return EINVAL;
    if (npd) {
        if (auto it = objs_.pds.find(mr->pd); it != objs_.pds.end()) it->second->users--;
        npd->users++;
        mr->pd = npd->id;
    }
    if (q.flags & IBV_REREG_MR_CHANGE_ACCESS) mr->access = q.access;
    if (q.flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        mr->addr = q.addr;
        mr->length = q.length;
        mr->iova = q.iova;
        mr->pid = req_pid_;
    }
    r.reg_mr = {mr->id, mr->key, mr->key};
    return 0;
}

int Device::do_create_channel(Client &c, Response &r, std::vector<int> &fds) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) < 0) return errno;
    auto ch = std::make_unique<Channel>();
    ch->id = objs_.new_id();
    ch->owner = &c;
    ch->rd.reset(p[0]);
    ch->wr.reset(p[1]);
    ::fcntl(p[1], F_SETFL, O_NONBLOCK);
    r.h.handle = ch->id;
    fds = {ch->rd.get()};
    objs_.channels[ch->id] = std::move(ch);
    return 0;
}

int Device::do_destroy_channel(Client &c, uint32_t h) {
    Channel *ch = objs_.owned(objs_.channels, c, h);
    if (!ch) return EINVAL;
    if (ch->users) return EBUSY;
    objs_.channels.erase(h);
    return 0;
}

int Device::do_create_cq(Client &c, const CreateCqReq &q, Response &r, std::vector<int> &fds) {
    if (q.cqe < 1 || uint32_t(q.cqe) > limits::kMaxCqe) return EINVAL;
    if (objs_.cqs.size() >= limits::kMaxCq) return ENOMEM;
    Channel *ch = nullptr;
    if (q.channel && !(ch = objs_.owned(objs_.channels, c, q.channel))) return EINVAL;
    auto cq = std::make_unique<Cq>();
    cq->id = objs_.new_id();
    cq->owner = &c;
    cq->channel = q.channel;
    cq->cookie = cq->id;  // event records name the handle: stale ones are recognisable
    cq->entries = shm::round_up_pow2(uint32_t(q.cqe) + 1);
    if (int e = cq->shm.create("simhca-cq", shm::cq_region_size(cq->entries))) return e;
    cq->ctl = static_cast<shm::CqCtl *>(cq->shm.data());
    cq->ring = reinterpret_cast<shm::Cqe *>(static_cast<char *>(cq->shm.data()) + shm::kCqEntriesOffset);
    if (ch) ch->users++;
    r.create_cq = {cq->id, cq->entries};
    fds = {cq->shm.fd()};
    objs_.cqs[cq->id] = std::move(cq);
    return 0;
}

// Resizing moves the not yet polled CQEs into a new region (index 0 on);
// the library holds its CQ lock across the call, so nobody polls meanwhile.
int Device::do_resize_cq(Client &c, const ResizeCqReq &q, Response &r, std::vector<int> &fds) {
    Cq *cq = objs_.owned(objs_.cqs, c, q.handle);
    if (!cq) return EINVAL;
    if (q.cqe < 1 || uint32_t(q.cqe) > limits::kMaxCqe) return EINVAL;
    uint32_t tail = cq->ctl->ring.tail.load(std::memory_order_acquire);
    uint32_t pending = cq->head - tail;
    if (pending > cq->entries) pending = 0;  // corrupted consumer index: drop
    uint32_t entries = shm::round_up_pow2(uint32_t(q.cqe) + 1);
    if (pending > entries - 1) return EINVAL;
    ShmRegion n;
    if (int e = n.create("simhca-cq", shm::cq_region_size(entries))) return e;
    auto *ctl = static_cast<shm::CqCtl *>(n.data());
    auto *ring = reinterpret_cast<shm::Cqe *>(static_cast<char *>(n.data()) + shm::kCqEntriesOffset);
    for (uint32_t i = 0; i < pending; ++i) ring[i] = cq->ring[(tail + i) & (cq->entries - 1)];
    ctl->armed.store(cq->ctl->armed.load());
    ctl->ring.head.store(pending, std::memory_order_release);
    cq->shm = std::move(n);
    cq->ctl = ctl;
    cq->ring = ring;
    cq->entries = entries;
    cq->head = pending;
    cq->overflowed = false;
    r.create_cq = {cq->id, entries};
    fds = {cq->shm.fd()};
    return 0;
}

int Device::do_destroy_cq(Client &c, uint32_t h, Response &r) {
    Cq *cq = objs_.owned(objs_.cqs, c, h);
    if (!cq) return EINVAL;
    if (cq->users) return EBUSY;
    if (cq->channel)
        if (auto it = objs_.channels.find(cq->channel); it != objs_.channels.end()) it->second->users--;
    r.destroyed = {cq->comp_events, cq->async_events};
    objs_.cqs.erase(h);
    return 0;
}

// XRCDs are keyed by the inode of the file the caller opened (the daemon
// fstat()s the passed fd itself, so a client cannot claim a file it could
// not open). Errors follow the kernel: no O_CREAT -> EAGAIN, O_EXCL -> EINVAL.
int Device::do_open_xrcd(Client &c, const OpenXrcdReq &q, int fd, Response &r) {
    UniqueFd owned_fd(fd);
    Xrcd *x = nullptr;
    dev_t dev = 0;
    ino_t ino = 0;
    if (q.has_fd) {
        if (!owned_fd) return EBADF;
        struct stat st;
        if (::fstat(owned_fd.get(), &st) < 0) return EBADF;
        dev = st.st_dev;
        ino = st.st_ino;
        for (auto &[id, xp] : objs_.xrcds)
            if (xp->has_inode && xp->dev == dev && xp->ino == ino) x = xp.get();
        if (x && (q.oflags & O_EXCL)) return EINVAL;
        if (!x && !(q.oflags & O_CREAT)) return EAGAIN;
    }
    if (!x) {
        auto nx = std::make_unique<Xrcd>();
        nx->id = objs_.new_id();
        nx->has_inode = q.has_fd;
        nx->dev = dev;
        nx->ino = ino;
        x = nx.get();
        objs_.xrcds[nx->id] = std::move(nx);
    }
    x->usecnt++;
    auto h = std::make_unique<XrcdHandle>(XrcdHandle{objs_.new_id(), &c, x->id});
    r.open_xrcd.handle = h->id;
    objs_.xrcd_handles[h->id] = std::move(h);
    return 0;
}

void Device::xrcd_put(uint32_t xrcd_id) {
    auto it = objs_.xrcds.find(xrcd_id);
    if (it == objs_.xrcds.end()) return;
    if (--it->second->usecnt <= 0) objs_.xrcds.erase(it);
}

int Device::do_close_xrcd(Client &c, uint32_t h) {
    Xrcd *x = objs_.xrcd_of_handle(c, h);
    if (!x) return EINVAL;
    // A private XRCD with live objects cannot go (the kernel says EBUSY);
    // a shared one just drops this opener's reference.
    if (!x->has_inode && x->usecnt > 1) return EBUSY;
    objs_.xrcd_handles.erase(h);
    xrcd_put(x->id);
    return 0;
}

int Device::do_create_srq(Client &c, const CreateSrqReq &q, Response &r, std::vector<int> &fds) {
    if (q.type != IBV_SRQT_BASIC && q.type != IBV_SRQT_XRC && q.type != IBV_SRQT_TM) return EOPNOTSUPP;
    Pd *pd = objs_.owned(objs_.pds, c, q.pd);
    if (!pd) return EINVAL;
    if (q.max_wr == 0 || q.max_wr > limits::kMaxSrqWr || q.max_sge > limits::kMaxSge) return EINVAL;
    if (q.srq_limit > q.max_wr) return EINVAL;
    if (objs_.srqs.size() >= limits::kMaxSrq) return ENOMEM;
    Xrcd *x = nullptr;
    Cq *cq = nullptr;
    if (q.type == IBV_SRQT_XRC) {
        x = objs_.xrcd_of_handle(c, q.xrcd);
        cq = objs_.owned(objs_.cqs, c, q.cq);
        if (!x || !cq) return EINVAL;
    }
    if (q.type == IBV_SRQT_TM) {  // a CQ of its own, and a matching list within the device's caps
        cq = objs_.owned(objs_.cqs, c, q.cq);
        if (!cq || q.tm_max_num_tags == 0 || q.tm_max_num_tags > limits::kTmMaxNumTags ||
            q.tm_max_ops > limits::kTmMaxOps)
            return EINVAL;
    }
    auto s = std::make_unique<Srq>();
    s->id = objs_.new_id();
    s->owner = &c;
    s->type = ibv_srq_type(q.type);
    s->pd = q.pd;
    s->xrcd = x ? x->id : 0;
    s->cq = cq ? cq->id : 0;
    s->cookie = s->id;
    s->max_wr = q.max_wr;
    s->entries = shm::round_up_pow2(q.max_wr);
    s->max_sge = std::max<uint32_t>(q.max_sge, 1);
    s->limit = q.srq_limit;
    if (q.type == IBV_SRQT_TM) {
        s->tm = std::make_unique<TagMatching>();
        s->tm->max_num_tags = q.tm_max_num_tags;
        s->tm->max_ops = q.tm_max_ops;
        s->tm->slots.resize(q.tm_max_num_tags);
    }
    if (int e = s->shm.create("simhca-srq", shm::srq_region_size(s->entries))) return e;
    s->ctl = static_cast<shm::SrqCtl *>(s->shm.data());
    s->ring = reinterpret_cast<shm::RecvWqe *>(static_cast<char *>(s->shm.data()) + shm::kSrqEntriesOffset);
    do {
        objs_.next_srqn = (objs_.next_srqn + 1) & 0xffffff;
    } while (objs_.next_srqn == 0 || objs_.srqn_to_srq.count(objs_.next_srqn));
    s->srqn = objs_.next_srqn;
    pd->users++;
    if (x) x->usecnt++;
    if (cq) cq->users++;
    r.create_srq = {s->id, s->srqn, s->entries, s->max_sge};
    fds = {s->shm.fd()};
    objs_.srqn_to_srq[s->srqn] = s->id;
    objs_.srqs[s->id] = std::move(s);
    return 0;
}

// IBV_SRQ_MAX_WR resizes the ring (grow or shrink, as rxe does; the device
// advertises IBV_DEVICE_SRQ_RESIZE): the posted WQEs move to a new shared
// region, in order, whose fd goes back to the library. Fewer entries than
// are posted, or than an armed limit, is EINVAL.
int Device::do_modify_srq(Client &c, const ModifySrqReq &q, Response &r, std::vector<int> &fds) {
    Srq *s = objs_.owned(objs_.srqs, c, q.handle);
    if (!s) return EINVAL;
    if (q.mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
    uint32_t max_wr = s->max_wr;
    uint32_t tail = s->ctl->rq.tail.load(std::memory_order_acquire);
    uint32_t posted = s->ctl->rq.head.load(std::memory_order_acquire) - tail;
    if (q.mask & IBV_SRQ_MAX_WR) {
        if (q.attr.max_wr == 0 || q.attr.max_wr > limits::kMaxSrqWr) return EINVAL;
        if (posted > s->entries || q.attr.max_wr < posted) return EINVAL;  // (a corrupt index counts as full)
        if (!(q.mask & IBV_SRQ_LIMIT) && s->limit && q.attr.max_wr < s->limit) return EINVAL;
        max_wr = q.attr.max_wr;
    }
    if ((q.mask & IBV_SRQ_LIMIT) && q.attr.srq_limit > max_wr) return EINVAL;
    uint32_t entries = shm::round_up_pow2(max_wr);
    if (entries != s->entries) {
        ShmRegion n;
        if (int e = n.create("simhca-srq", shm::srq_region_size(entries))) return e;
        auto *ctl = static_cast<shm::SrqCtl *>(n.data());
        auto *ring = reinterpret_cast<shm::RecvWqe *>(static_cast<char *>(n.data()) + shm::kSrqEntriesOffset);
        for (uint32_t i = 0; i < posted; ++i) ring[i] = s->ring[(tail + i) & (s->entries - 1)];
        ctl->rq.head.store(posted, std::memory_order_release);
        s->shm = std::move(n);
        s->ctl = ctl;
        s->ring = ring;
        s->entries = entries;
        fds = {s->shm.fd()};
    }
    s->max_wr = max_wr;
    if (q.mask & IBV_SRQ_LIMIT) s->limit = q.attr.srq_limit;
    r.create_srq = {s->id, s->srqn, s->entries, s->max_sge};
    return 0;
}

int Device::do_query_srq(Client &c, uint32_t h, Response &r) {
    Srq *s = objs_.owned(objs_.srqs, c, h);
    if (!s) return EINVAL;
    r.srq_attr.attr.max_wr = s->max_wr;
    r.srq_attr.attr.max_sge = s->max_sge;
    r.srq_attr.attr.srq_limit = s->limit;
    return 0;
}

void Device::destroy_srq_object(Srq &s) {
    if (auto it = objs_.pds.find(s.pd); it != objs_.pds.end()) it->second->users--;
    if (s.cq)
        if (auto it = objs_.cqs.find(s.cq); it != objs_.cqs.end()) it->second->users--;
    if (s.xrcd) xrcd_put(s.xrcd);
    objs_.srqn_to_srq.erase(s.srqn);
    objs_.srqs.erase(s.id);
}

int Device::do_destroy_srq(Client &c, uint32_t h, Response &r) {
    Srq *s = objs_.owned(objs_.srqs, c, h);
    if (!s) return EINVAL;
    if (s->users) return EBUSY;
    r.destroyed = {0, s->async_events};
    destroy_srq_object(*s);
    return 0;
}

}  // namespace simhca
