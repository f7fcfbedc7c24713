// SPDX-License-Identifier: BSD-3-Clause
// Device discovery, context open/close and the device/port queries.
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

#include "../common/limits.hpp"
#include "lib.hpp"

#undef ibv_query_port

using namespace simhca;
using namespace simhca::lib;

namespace {

// The one device this library knows. It lives for the whole process:
// ibv_free_device_list must not invalidate devices that were opened.
struct Device {
    ibv_device dev;
    uint64_t guid; // network order
    bool present;
};
Device g_device;
std::mutex g_device_mu;

bool probe(Device &d) {
    Conn c;
    if (c.connect()) return false;
    proto::Request req{};
    proto::Response resp{};
    if (c.call(proto::Op::Probe, req, resp)) return false;
    std::memset(&d.dev, 0, sizeof(d.dev));
    d.dev.node_type = IBV_NODE_CA;
    d.dev.transport_type = IBV_TRANSPORT_IB;
    std::snprintf(d.dev.name, sizeof(d.dev.name), "%s", limits::kDeviceName);
    std::snprintf(d.dev.dev_name, sizeof(d.dev.dev_name), "%s", limits::kUverbsName);
    std::snprintf(d.dev.dev_path, sizeof(d.dev.dev_path), "/sys/class/infiniband_verbs/%s", limits::kUverbsName);
    std::snprintf(d.dev.ibdev_path, sizeof(d.dev.ibdev_path), "%s", resp.hello.sysfs_dir);
    d.guid = resp.hello.node_guid;
    d.present = true;
    return true;
}

void fill_device_attr(ibv_device_attr &a, const Context &c) {
    std::memset(&a, 0, sizeof(a));
    std::snprintf(a.fw_ver, sizeof(a.fw_ver), "%s", limits::kFwVer);
    a.node_guid = c.node_guid;
    a.sys_image_guid = c.node_guid;
    a.max_mr_size = ~0ull;
    a.page_size_cap = 0xfffff000;
    a.vendor_id = limits::kVendorId;
    a.vendor_part_id = limits::kVendorPartId;
    a.hw_ver = limits::kHwVer;
    a.max_qp = limits::kMaxQp;
    a.max_qp_wr = limits::kMaxQpWr;
    a.device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR | IBV_DEVICE_CHANGE_PHY_PORT |
                         IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_RC_RNR_NAK_GEN |
                         IBV_DEVICE_N_NOTIFY_CQ | IBV_DEVICE_XRC | IBV_DEVICE_MEM_WINDOW |
                         IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_SRQ_RESIZE;
    a.max_sge = limits::kMaxSge;
    a.max_sge_rd = limits::kMaxSge;
    a.max_cq = limits::kMaxCq;
    a.max_cqe = limits::kMaxCqe;
    a.max_mr = limits::kMaxMr;
    a.max_pd = limits::kMaxPd;
    a.max_qp_rd_atom = limits::kMaxQpRdAtom;
    a.max_ee_rd_atom = 0;
    a.max_res_rd_atom = limits::kMaxQp * limits::kMaxQpRdAtom;
    a.max_qp_init_rd_atom = limits::kMaxQpRdAtom;
    a.atomic_cap = IBV_ATOMIC_HCA;
    a.max_mcast_grp = int(limits::kMaxMcastGrp);
    a.max_mcast_qp_attach = int(limits::kMaxMcastQpAttach);
    a.max_total_mcast_qp_attach = int(limits::kMaxMcastGrp * limits::kMaxMcastQpAttach);
    a.max_ah = limits::kMaxAh;
    a.max_mw = limits::kMaxMr;
    a.max_srq = limits::kMaxSrq;
    a.max_srq_wr = limits::kMaxSrqWr;
    a.max_srq_sge = limits::kMaxSge;
    a.max_pkeys = 128;
    a.local_ca_ack_delay = 16;
    a.phys_port_cnt = 1;
}

} // namespace

// For abi/'s ibv_get_sysfs_path(): the sysfs root whose class/infiniband
// holds our device directory (the daemon's --sysfs DIR, when it is laid out
// as <root>/class/infiniband/<name>), or nullptr. Internal to the library.
// Asks the daemon until one answers; once found, the root never changes (the
// caller keeps the pointer).
extern "C" const char *simhca_sysfs_root() noexcept {
    static std::string root;
    static std::atomic<const char *> found{nullptr};
    if (const char *r = found.load(std::memory_order_acquire)) return r;
    std::lock_guard<std::mutex> g(g_device_mu);
    if (const char *r = found.load(std::memory_order_acquire)) return r;
    if (!g_device.present && !probe(g_device)) return nullptr;
    std::string p = g_device.dev.ibdev_path;
    std::string tail = std::string("/class/infiniband/") + limits::kDeviceName;
    if (p.size() <= tail.size() || p.compare(p.size() - tail.size(), tail.size(), tail) != 0) return nullptr;
    root = p.substr(0, p.size() - tail.size());
    found.store(root.c_str(), std::memory_order_release);
    return root.c_str();
}

SIMHCA_API ibv_device **ibv_get_device_list(int *num_devices) noexcept {
    std::lock_guard<std::mutex> g(g_device_mu);
    auto **list = static_cast<ibv_device **>(std::calloc(2, sizeof(ibv_device *)));
    if (!list) {
        errno = ENOMEM;
        return nullptr;
    }
    int n = 0;
    // No daemon = no device, exactly like a machine without an HCA.
    if (g_device.present || probe(g_device)) list[n++] = &g_device.dev;
    if (num_devices) *num_devices = n;
    return list;
}

SIMHCA_API void ibv_free_device_list(ibv_device **list) noexcept { std::free(list); }

SIMHCA_API const char *ibv_get_device_name(ibv_device *device) noexcept { return device ? device->name : nullptr; }

SIMHCA_API __be64 ibv_get_device_guid(ibv_device *device) noexcept {
    if (device != &g_device.dev) return 0;
    return g_device.guid;
}

SIMHCA_API int ibv_get_device_index(ibv_device *device) noexcept { return device == &g_device.dev ? 0 : -1; }

ibv_device *simhca::lib::the_device() noexcept {
    std::lock_guard<std::mutex> g(g_device_mu);
    return g_device.present || probe(g_device) ? &g_device.dev : nullptr;
}

void simhca::lib::init_context(Context &c, ibv_device *device, const proto::HelloResp &hello,
                               const int fds[3]) noexcept {
    c.doorbell = fds[1];
    if (fds[2] >= 0) { // the daemon's read-only "awake" word (see ring_doorbell_sq)
        void *p = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fds[2], 0);
        if (p != MAP_FAILED) c.daemon_awake = static_cast<const std::atomic<uint32_t> *>(p);
        ::close(fds[2]);
    }
    c.conn.set_identity(hello.client_id, hello.secret);
    c.lid = hello.lid;
    c.node_guid = hello.node_guid;
    verbs_context &v = c.vctx;
    ibv_context &ctx = v.context;
    ctx.device = device;
    ctx.cmd_fd = c.conn.fd();
    ctx.async_fd = fds[0];
    ctx.num_comp_vectors = 1;
    pthread_mutex_init(&ctx.mutex, nullptr);
    ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
    ctx.ops.post_send = post_send;
    ctx.ops.post_recv = post_recv;
    ctx.ops.post_srq_recv = post_srq_recv;
    ctx.ops.poll_cq = poll_cq;
    ctx.ops.req_notify_cq = req_notify_cq;
    ctx.ops.alloc_mw = alloc_mw;
    ctx.ops.dealloc_mw = dealloc_mw;
    ctx.ops.bind_mw = bind_mw;
    v.sz = sizeof(verbs_context);
    v.query_port = query_port_ex;
    v.query_device_ex = query_device_ex;
    v.create_cq_ex = create_cq_ex;
    v.open_xrcd = open_xrcd;
    v.close_xrcd = close_xrcd;
    v.create_srq_ex = create_srq_ex;
    v.get_srq_num = get_srq_num;
    v.post_srq_ops = post_srq_ops;
    v.create_qp_ex = create_qp_ex;
    v.open_qp = open_qp;
    v.advise_mr = advise_mr;
    v.alloc_td = alloc_td;
    v.dealloc_td = dealloc_td;
    v.alloc_parent_domain = alloc_parent_domain;
    v.alloc_dm = alloc_dm;
    v.free_dm = free_dm;
    v.reg_dm_mr = reg_dm_mr;
}

ibv_context *simhca::lib::connect_context(ibv_device *device, proto::Op op, int pass_fd) noexcept {
    auto *c = new (std::nothrow) Context();
    if (!c) return fail<ibv_context>(ENOMEM);
    std::memset(&c->vctx, 0, sizeof(c->vctx));
    if (int e = c->conn.connect()) {
        delete c;
        return fail<ibv_context>(e == ECONNREFUSED || e == ENOENT ? ENODEV : e);
    }
    proto::Request req{};
    proto::Response resp{};
    if (op == proto::Op::Hello) req.hello = {proto::kMagic, proto::kVersion};
    int fds[3] = {-1, -1, -1};
    if (int e = c->conn.call(op, req, resp, pass_fd, fds, 3); e || fds[0] < 0 || fds[1] < 0) {
        for (int fd : fds)
            if (fd >= 0) ::close(fd);
        delete c;
        return fail<ibv_context>(e ? e : EPROTO);
    }
    init_context(*c, device, resp.hello, fds);
    return &c->vctx.context;
}

SIMHCA_API ibv_context *ibv_open_device(ibv_device *device) noexcept {
    if (device != &g_device.dev) return fail<ibv_context>(ENODEV);
    return connect_context(device, proto::Op::Hello, -1);
}

SIMHCA_API int ibv_close_device(ibv_context *context) noexcept {
    if (!context) return EINVAL;
    Context *c = ctx_of(context);
    // Closing the socket makes the daemon release every object of this
    // context, as closing the uverbs file does in the kernel - once no
    // imported context holds a copy of it any more.
    ::close(context->async_fd);
    ::close(c->doorbell);
    if (c->daemon_awake) ::munmap(const_cast<std::atomic<uint32_t> *>(c->daemon_awake), 4096);
    pthread_mutex_destroy(&context->mutex);
    if (c->imported_cmd_fd >= 0) ::close(c->imported_cmd_fd);
    delete c;
    return 0;
}

SIMHCA_API int ibv_query_device(ibv_context *context, ibv_device_attr *attr) noexcept {
    if (!context || !attr) return EINVAL;
    fill_device_attr(*attr, *ctx_of(context));
    return 0;
}

namespace simhca::lib {

int query_device_ex(ibv_context *c, const ibv_query_device_ex_input *in, ibv_device_attr_ex *attr,
                    size_t len) noexcept {
    if (in && in->comp_mask) return EINVAL;
    if (len < sizeof(ibv_device_attr)) return EINVAL;
    ibv_device_attr_ex a;
    std::memset(&a, 0, sizeof(a));
    fill_device_attr(a.orig_attr, *ctx_of(c));
    a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
    a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
    // Nothing is ever pinned: the daemon reaches registered memory through
    // process_vm_readv/writev when it needs it, which is on-demand paging in
    // effect, including implicit (whole address space) registrations.
    a.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
    constexpr uint32_t kAll = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                              IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
    a.odp_caps.per_transport_caps.rc_odp_caps = kAll;
    a.odp_caps.per_transport_caps.uc_odp_caps =
        IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_SRQ_RECV;
    a.odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
    a.xrc_odp_caps = kAll;
    a.max_dm_size = limits::kMaxDm;
    a.tm_caps.max_rndv_hdr_size = limits::kTmMaxRndvHdrSize;
    a.tm_caps.max_num_tags = limits::kTmMaxNumTags;
    a.tm_caps.flags = IBV_TM_CAP_RC;
    a.tm_caps.max_ops = limits::kTmMaxOps;
    a.tm_caps.max_sge = limits::kTmMaxSge;
    std::memcpy(attr, &a, std::min(len, sizeof(a)));
    if (len > sizeof(a)) std::memset(reinterpret_cast<char *>(attr) + sizeof(a), 0, len - sizeof(a));
    return 0;
}

int query_port_ex(ibv_context *context, uint8_t port, ibv_port_attr *out, size_t len) noexcept {
    if (!context || !out) return EINVAL;
    if (port != 1) return EINVAL;
    Context *c = ctx_of(context);
    proto::Request req{};
    proto::Response resp{};
    if (int e = c->conn.call(proto::Op::QueryPort, req, resp)) return e;
    // The caller's struct may be larger than ours (a program built with newer verbs.h than this library, e.g.
    // rdma-core 56's active_speed_ex): what we do not know is zero, never stack garbage.
    std::memset(out, 0, len);
    ibv_port_attr a;
    std::memset(&a, 0, sizeof(a));
    a.state = ibv_port_state(resp.port.state);
    a.max_mtu = IBV_MTU_4096;
    a.active_mtu = IBV_MTU_4096;
    a.gid_tbl_len = limits::kGidTableLen;
    a.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_DEVICE_MGMT_SUP | IBV_PORT_VENDOR_CLASS_SUP |
                       IBV_PORT_CAP_MASK2_SUP;
    a.max_msg_sz = limits::kMaxMsgSize;
    a.pkey_tbl_len = 128;
    a.lid = resp.port.lid;
    a.sm_lid = resp.port.sm_lid;
    a.lmc = 0;
    a.max_vl_num = 4;
    a.sm_sl = 0;
    a.subnet_timeout = 18;
    a.active_width = 2;  // 4X
    a.active_speed = 32; // EDR
    a.phys_state = a.state == IBV_PORT_ACTIVE ? 5 : 3; // LinkUp / Disabled
    a.link_layer = IBV_LINK_LAYER_INFINIBAND;
    std::memcpy(out, &a, std::min(len, sizeof(a)));
    return 0;
}

} // namespace simhca::lib

// The exported symbol takes the pre-1.x layout (without the last fields).
SIMHCA_API int ibv_query_port(ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *port_attr) noexcept {
    return query_port_ex(context, port_num, reinterpret_cast<ibv_port_attr *>(port_attr),
                         offsetof(ibv_port_attr, port_cap_flags2));
}

SIMHCA_API int ibv_query_gid(ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid) noexcept {
    if (!context || !gid || port_num != 1 || index < 0 || uint32_t(index) >= limits::kGidTableLen) return -1;
    if (index != 0) {
        std::memset(gid->raw, 0, sizeof(gid->raw));  // an empty entry, as sysfs shows it
        return 0;
    }
    Context *c = ctx_of(context);
    uint64_t pfx = __builtin_bswap64(limits::kSubnetPrefix);
    std::memcpy(gid->raw, &pfx, 8);
    std::memcpy(gid->raw + 8, &c->node_guid, 8);
    return 0;
}

SIMHCA_API int ibv_query_pkey(ibv_context *context, uint8_t port_num, int index, __be16 *pkey) noexcept {
    if (!context || !pkey || port_num != 1 || index < 0 || index >= 128) return -1;
    *pkey = index == 0 ? __builtin_bswap16(limits::kPkeyDefault) : 0;
    return 0;
}

SIMHCA_API int ibv_get_pkey_index(ibv_context *context, uint8_t port_num, __be16 pkey) noexcept {
    if (!context || port_num != 1) return -1;
    if (pkey == __builtin_bswap16(limits::kPkeyDefault)) return 0;
    errno = ENOENT;
    return -1;
}

SIMHCA_API int _ibv_query_gid_ex(ibv_context *context, uint32_t port_num, uint32_t gid_index, ibv_gid_entry *entry,
                                 uint32_t flags, size_t entry_size) noexcept {
    if (!context || !entry || flags) return EINVAL;
    if (port_num != 1 || gid_index >= limits::kGidTableLen) return EINVAL;
    if (gid_index != 0) return ENODATA;  // empty entry
    ibv_gid_entry e;
    std::memset(&e, 0, sizeof(e));
    if (ibv_query_gid(context, 1, 0, &e.gid)) return EINVAL;
    e.gid_index = 0;
    e.port_num = 1;
    e.gid_type = IBV_GID_TYPE_IB;
    e.ndev_ifindex = 0;
    std::memcpy(entry, &e, std::min(entry_size, sizeof(e)));
    return 0;
}

SIMHCA_API ssize_t _ibv_query_gid_table(ibv_context *context, ibv_gid_entry *entries, size_t max_entries,
                                        uint32_t flags, size_t entry_size) noexcept {
    if (!context || flags) return -EINVAL;
    if (max_entries < 1) return -EINVAL;
    if (int e = _ibv_query_gid_ex(context, 1, 0, entries, 0, entry_size)) return -e;
    return 1;
}
