// SPDX-License-Identifier: BSD-3-Clause
// The xrc BTL component: MCA registration, open/close, and btl_init, which finds the usable device ports
// (ACTIVE ports of XRC-capable devices, after the include/exclude filters) and builds one module per port.
// When there is none, the component disqualifies itself: quietly (a verbose line) when other BTLs can carry the
// job, with our help message when the user asked for xrc explicitly.
#include "btl_xrc.h"

#include "src/core/device_discovery.h"
#include "src/core/device_locality.h"
#include "src/core/port_speed.h"
#include "src/core/port_transport.h"
#include "src/core/receive_queue_spec.h"
#include "src/core/text_list.h"

#include "btl_xrc_eager.h"
#include "btl_xrc_endpoint.h"
#include "btl_xrc_job.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

namespace {

// What a port advertises when its speed or width code is one this build does not know (Mb/s).
constexpr uint32_t kBtlXrcFallbackBandwidthMbps = 10000;

int xrc_register() noexcept {
    const int rc = mca_btl_xrc_register_params();
    return rc == OPAL_SUCCESS ? mca_btl_xrc_register_pvars() : rc;
}

int xrc_open() noexcept {
    mca_btl_xrc_add_help_dir();
    mca_btl_xrc_component.output = opal_output_open(nullptr);
    OBJ_CONSTRUCT(&mca_btl_xrc_component.lock, opal_recursive_mutex_t);
    opal_output_set_verbosity(mca_btl_xrc_component.output, mca_btl_xrc_component.params.verbose);
    mca_btl_xrc_component.modules.clear();
    return OPAL_SUCCESS;
}

int xrc_close() noexcept {
    // Open MPI has finalized every module by now: what is left of them is memory.
    mca_btl_xrc_component.modules.clear();
    mca_btl_xrc_component.job.reset();
    mca_btl_xrc_status_fini();
    OBJ_DESTRUCT(&mca_btl_xrc_component.lock);
    if (mca_btl_xrc_component.output >= 0) opal_output_close(mca_btl_xrc_component.output);
    mca_btl_xrc_component.output = -1;
    return OPAL_SUCCESS;
}

// Nothing usable: say why, at the level the situation deserves.
void report_no_usable_port(const xrc::DiscoveryReport &report) {
    const std::string devices = xrc::indented_lines(report.device_names, "(no verbs device at all)");
    const std::string passed = xrc::indented_lines(report.passed_over, "(nothing)");
    BTL_XRC_VERBOSE(1, "btl:xrc: disqualified on %s: no ACTIVE port of an XRC-capable device (devices seen: %d)",
                    opal_process_info.nodename, static_cast<int>(report.device_names.size()));
    if (mca_btl_xrc_explicitly_requested()) {
        mca_btl_xrc_show_help("no-usable-port", opal_process_info.nodename, devices.c_str(), passed.c_str());
    }
}

// The pkey index of btl_xrc_pkey on the port (0 when unset); -1 when the port does not have that pkey.
int pkey_index(ibv_context *context, uint8_t port, int pkey, int table_len) {
    if (pkey == 0) return 0;
    for (int i = 0; i < table_len; ++i) {
        __be16 value = 0;
        if (ibv_query_pkey(context, port, i, &value) == 0 && (ntohs(value) & 0x7fff) == (pkey & 0x7fff)) return i;
    }
    return -1;
}

mca_btl_base_module_t **build_modules(xrc::DiscoveryReport &report, const xrc::ReceiveQueueSpec &spec, bool threads,
                                      int *num_btls) {
    auto made = mca_btl_xrc_job_create();
    if (!made) {
        BTL_XRC_VERBOSE(1, "btl:xrc: disqualified: %s", made.error().c_str());
        return nullptr;
    }
    mca_btl_xrc_component.job = std::move(*made);
    const auto &job = *mca_btl_xrc_component.job;
    auto &modules = mca_btl_xrc_component.modules;
    modules.reserve(report.usable_port_count());
    int n = 0;
    auto config = xrc::transport_config(mca_btl_xrc_component.params, spec, job, opal_process_info.job_session_dir,
                                        static_cast<uint32_t>(getuid()));
    // Several rails with btl_xrc_rail_failover: every send is signaled, so that each one the HCA acknowledged is
    // retired on its own completion; when a rail is lost, only what it never acknowledged is sent again over
    // another (with selective signaling, sends already delivered but not yet retired by a later signaled one would
    // go out twice).
    const bool failover = mca_btl_xrc_component.params.rail_failover && report.usable_port_count() > 1;
    if (failover) config.signal_interval = 1;
    // ... and the traffic of a connection that broke while this process's port stayed up comes back when the
    // connection's node answers again (xrc::CmConfig::probe_broken_links): a path lost and found with no port event.
    config.cm.probe_broken_links = failover;
    // User-Level Failure Mitigation: a dead process's node refuses what still names it, and that must cost the
    // node's other ranks nothing: every send is kept until its completion, by its fragment or, inline, as a copy in
    // its link's queue (the sends chosen by mca_btl_xrc_module_init), so that what followed a refused request goes
    // out again over a new connection on the same rail (btl_xrc_peer_death.cc); with several rails a refusal is a
    // death, not the loss of the rail (btl_xrc_failover.cc).
    mca_btl_xrc_ft_init();
    // ... and a TGT QP outlives its creator's death: a node-mate holds it too (xrc::CmConfig::node_mate_holds).
    config.cm.node_mate_holds = mca_btl_xrc_ft_enabled();
    if (mca_btl_xrc_ft_enabled()) config.cm.requeue_refused = true;
    // btl_xrc_outage_limit: an outage past the retry budget is ridden through (btl_xrc_failover.cc): every send is
    // kept until its completion and numbered, so that what a timeout hands back goes out again over the next
    // connection and the receiver drops what it had. With several rails only where no other rail reaches that node
    // (the others fail over, as without the limit): every rail down at once, a switch that reboots. Under ULFM a
    // refusal is a death, not an outage.
    const bool outage =
        config.cm.outage_limit_us != 0 && !mca_btl_xrc_ft_enabled() && (failover || report.usable_port_count() == 1);
    if (!outage) config.cm.outage_limit_us = 0;  // and the port's grace stays btl_xrc_port_down_grace's
    // Inline sends are kept as copies in their queues under ULFM and riding outages on one rail; with several rails
    // failover's sends keep their fragments, none inline (a copy forwarded to another rail needs its own).
    config.keep_inline_copies = (mca_btl_xrc_ft_enabled() || outage) && !failover;
    if (outage && failover) config.max_inline = 0;

    for (auto &opened : report.devices) {
        auto device = std::make_shared<xrc::OpenedDevice>(std::move(opened));
        for (const auto &port : device->ports) {
            const int pkey = pkey_index(device->context.get(), port.port, mca_btl_xrc_component.params.pkey,
                                        port.port_attr.pkey_tbl_len);
            if (pkey < 0) {
                mca_btl_xrc_show_help("invalid-param", opal_process_info.nodename, "btl_xrc_pkey",
                                      std::to_string(mca_btl_xrc_component.params.pkey).c_str(),
                                      (port.device + ":" + std::to_string(port.port) + " has no such pkey").c_str(),
                                      "0 or a pkey listed by ibv_devinfo -v for the port");
                continue;
            }
            config.path.pkey_index = static_cast<uint16_t>(pkey);
            config.cm.port_index = static_cast<uint32_t>(n);
            auto owned = std::make_unique<mca_btl_xrc_module_t>();
            mca_btl_xrc_module_t *module = owned.get();
            module->lock = &mca_btl_xrc_component.lock;
            xrc::PortTransport::Listener listener;
            listener.lock_queues = [module] { OPAL_THREAD_LOCK(module->lock); };
            listener.unlock_queues = [module] { OPAL_THREAD_UNLOCK(module->lock); };
            listener.link_failed = [module](const xrc::NodeLink *link, const std::string &why) {
                mca_btl_xrc_report_link_failure(module, link, why);
            };
            listener.link_revived = [module](const xrc::NodeLink &link) { mca_btl_xrc_link_revived(module, link); };
            listener.note = [](const std::string &what) { BTL_XRC_VERBOSE(10, "btl:xrc: %s", what.c_str()); };
            listener.changed = [] { mca_btl_xrc_status_changed(); };
            listener.address_moved = [](uint64_t port, uint16_t old_lid, uint16_t new_lid) {
                mca_btl_xrc_component.job->move_port(port, old_lid, new_lid);
            };
            const int index = n;
            auto lookup = [index](uint32_t rank) { return mca_btl_xrc_component.job->port_address(rank, index); };
            auto transport = xrc::PortTransport::make(device, port, config, lookup, listener);
            if (!transport) {
                opal_output(0, "btl:xrc: %s: %s:%u is not usable: %s", opal_process_info.nodename, port.device.c_str(),
                            port.port, transport.error().c_str());
                continue;
            }
            module->super = mca_btl_xrc_module_template;
            module->super.btl_flags |= kBtlXrcModuleFlags;
            if (module->super.btl_bandwidth == 0) {
                // btl_xrc_bandwidth 0 (the default): the port's own data rate, so that ob1 weighs rails by it.
                const uint32_t mbps =
                    xrc::port_bandwidth_mbps(port.port_attr.active_speed, port.port_attr.active_width);
                module->super.btl_bandwidth = mbps != 0 ? mbps : kBtlXrcFallbackBandwidthMbps;
            }
            module->transport = std::move(*transport);
            module->transport->share_finalizing_ranks(&mca_btl_xrc_component.finalizing_ranks);
            module->index = n;
            if (mca_btl_xrc_module_init(module, threads) != OPAL_SUCCESS) {
                opal_output(0, "btl:xrc: %s: %s:%u: cannot set up the registration cache or fragment lists",
                            opal_process_info.nodename, port.device.c_str(), port.port);
                module->super.btl_finalize(&module->super);
                continue;
            }
            modules.push_back(std::move(owned));
            ++n;
            BTL_XRC_VERBOSE(1, "btl:xrc: %s: using %s:%u (LID %u, %u Mb/s), connections %s (%zu nodes)",
                            opal_process_info.nodename, port.device.c_str(), port.port, port.port_attr.lid,
                            module->super.btl_bandwidth, job.eager ? "eager" : "on demand", job.node_count);
        }
    }
    // The BTL base takes this array and frees it with free(), so it must come from malloc.
    mca_btl_xrc_malloced_t<mca_btl_base_module_t *> array(
        n == 0 ? nullptr : static_cast<mca_btl_base_module_t **>(malloc(n * sizeof(mca_btl_base_module_t *))));
    if (array == nullptr || mca_btl_xrc_modex_publish(modules) != OPAL_SUCCESS) {
        for (auto &module : modules) module->super.btl_finalize(&module->super);
        modules.clear();
        return nullptr;
    }
    for (int i = 0; i < n; ++i) array.get()[i] = &modules[i]->super;
    *num_btls = n;
    // Several rails with btl_xrc_rail_failover: one rail's loss is survived (btl_xrc_failover.cc). Decided here,
    // once: otherwise the modules keep the sends without a test of their own.
    if (failover && n > 1) {
        for (auto &module : modules) mca_btl_xrc_failover_enable(module.get(), threads, outage);
        // Said once per process, so that a job's log shows whether a lost rail would end it or be survived.
        BTL_XRC_VERBOSE(1, "btl:xrc: %s: rail failover on: the loss of one of %d rails is survived%s",
                        opal_process_info.nodename, n,
                        outage ? ", and outages of every rail past the retry budget are ridden through" : "");
    } else if (outage && n == 1) {
        mca_btl_xrc_failover_enable(modules.front().get(), threads, true);
        BTL_XRC_VERBOSE(1, "btl:xrc: %s: outages past the retry budget ridden through for up to %d s",
                        opal_process_info.nodename, mca_btl_xrc_component.params.outage_limit);
    }
    // Read by the BML when it registers our progress, after btl_init: chosen once, like the modules' sends.
    // With failover, the one that also counts each SRQ message's source (what a rail delivered, btl_xrc_failover.cc).
    if (mca_btl_xrc_failover_enabled())
        mca_btl_xrc_component.super.btl_progress =
            threads ? mca_btl_xrc_progress_counting_locked : mca_btl_xrc_progress_counting_unlocked;
    else
        mca_btl_xrc_component.super.btl_progress =
            threads ? mca_btl_xrc_progress_locked : mca_btl_xrc_progress_unlocked;
    mca_btl_xrc_status_init(modules, config.xrcd_dir, config.job_name);
    return array.release();
}

// The sends need the module's lock when the application's threads may call MPI at once (mpi_threads);
// progress_threads is about Open MPI's own progress thread, which never calls a BTL's sends (4.1 passes its
// build-time OPAL_ENABLE_PROGRESS_THREADS there).
mca_btl_base_module_t **xrc_init(int *num_btls, bool /*progress_threads*/, bool mpi_threads) noexcept {
    *num_btls = 0;
    try {
        if (mca_btl_xrc_validate_params() != OPAL_SUCCESS) {
            BTL_XRC_VERBOSE(1, "btl:xrc: disqualified: invalid MCA parameter value (see the message above)");
            return nullptr;
        }
        const auto &P = mca_btl_xrc_component.params;
        const auto include = xrc::parse_port_filter(P.if_include ? P.if_include : "");
        const auto exclude = xrc::parse_port_filter(P.if_exclude ? P.if_exclude : "");
        if (!include || !exclude) return nullptr;  // refused (and said) by mca_btl_xrc_validate_params already
        auto report = xrc::discover_xrc_ports(*include, *exclude);
        if (!report.error.empty()) {
            const std::string devices = xrc::indented_lines(report.device_names, "(no verbs device at all)");
            mca_btl_xrc_show_help("unknown-device", opal_process_info.nodename, report.error.c_str(), devices.c_str());
            return nullptr;
        }
        if (report.usable_port_count() == 0) {
            report_no_usable_port(report);
            return nullptr;
        }
        if (!P.ignore_locality) {
            for (const auto &note : xrc::keep_nearest_devices(report.devices))
                BTL_XRC_VERBOSE(1, "btl:xrc: %s: passing over %s", opal_process_info.nodename, note.c_str());
        }
        const auto parsed = xrc::parse_receive_queues(P.receive_queues);
        if (!parsed) return nullptr;  // refused (and said) by mca_btl_xrc_validate_params already
        const xrc::ReceiveQueueSpec &spec = *parsed;
        for (const auto &dev : report.devices) {
            const auto fits =
                xrc::check_receive_queues_fit_device(spec, static_cast<uint32_t>(dev.device_attr.max_srq_wr));
            if (!fits) {
                mca_btl_xrc_show_help("invalid-param", opal_process_info.nodename, "btl_xrc_receive_queues",
                                      P.receive_queues, (dev.name + ": " + fits.error().message()).c_str(),
                                      "COUNT values within the device's max_srq_wr (see ibv_devinfo -v)");
                return nullptr;
            }
        }
        return build_modules(report, spec, mpi_threads || opal_using_threads(), num_btls);
    } catch (...) {
        BTL_XRC_VERBOSE(1, "btl:xrc: disqualified: out of memory during initialisation");
        *num_btls = 0;
        return nullptr;
    }
}

}  // namespace

mca_btl_xrc_component_t::~mca_btl_xrc_component_t() {
    for (auto &module : modules) (void)module.release();
}

extern "C" {
// The one symbol the plugin exports (see btl_xrc.map). Designated initialisers: members in declaration order.
__attribute__((visibility("default"))) mca_btl_xrc_component_t mca_btl_xrc_component = {
    .super =
        {
            .btl_version =
                {
                    MCA_BTL_DEFAULT_VERSION("xrc"),
                    .mca_open_component = xrc_open,
                    .mca_close_component = xrc_close,
                    .mca_register_component_params = xrc_register,
                },
            .btl_data =
                {
                    .param_field = MCA_BASE_METADATA_PARAM_CHECKPOINT,
                },
            .btl_init = xrc_init,
            .btl_progress = mca_btl_xrc_progress_unlocked,
        },
    .params = {},
    .output = -1,
    .modules = {},
    .lock = {},
    .job = nullptr,
    .status_countdown = UINT32_MAX,
};
}
