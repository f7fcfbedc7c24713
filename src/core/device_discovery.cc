// SPDX-License-Identifier: BSD-3-Clause
#include "device_discovery.h"

namespace xrc {

std::size_t DiscoveryReport::usable_port_count() const noexcept {
    std::size_t n = 0;
    for (const auto &dev : devices) n += dev.ports.size();
    return n;
}

const char *port_state_name(ibv_port_state state) noexcept {
    switch (state) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    }
    return "UNKNOWN";
}

namespace {

// A filter naming a device that does not exist is almost always a typo: refuse it rather than silently
// running on other devices (or none).
std::string unknown_device_in(const PortFilter &filter, const std::vector<std::string> &names,
                              const char *param) {
    for (const auto &sel : filter.selectors) {
        bool found = false;
        for (const auto &name : names) found = found || name == sel.device;
        if (!found) return std::string(param) + " names device \"" + sel.device + "\", which does not exist";
    }
    return {};
}

}  // namespace

DiscoveryReport discover_xrc_ports(const PortFilter &include, const PortFilter &exclude) {
    DiscoveryReport report;
    const DeviceList list;
    for (int i = 0; i < list.size(); ++i) report.device_names.emplace_back(ibv_get_device_name(list[i]));

    report.error = unknown_device_in(include, report.device_names, "btl_xrc_if_include");
    if (report.error.empty()) report.error = unknown_device_in(exclude, report.device_names, "btl_xrc_if_exclude");
    if (!report.error.empty()) return report;

    for (int i = 0; i < list.size(); ++i) {
        const std::string name = ibv_get_device_name(list[i]);
        if (!include.empty() && !include.names_device(name)) {
            report.passed_over.push_back(name + ": not in btl_xrc_if_include");
            continue;
        }
        OpenedDevice dev;
        dev.name = name;
        dev.context.reset(ibv_open_device(list[i]));
        if (!dev.context) {
            report.passed_over.push_back(name + ": cannot be opened (" + std::to_string(errno) + ")");
            continue;
        }
        if (ibv_query_device(dev.context.get(), &dev.device_attr) != 0) {
            report.passed_over.push_back(name + ": ibv_query_device failed");
            continue;
        }
        if (!(dev.device_attr.device_cap_flags & IBV_DEVICE_XRC)) {
            report.passed_over.push_back(name + ": does not support XRC");
            continue;
        }
        for (int p = 1; p <= dev.device_attr.phys_port_cnt; ++p) {
            const auto port = static_cast<std::uint8_t>(p);
            const std::string where = name + ":" + std::to_string(p);
            if (!include.empty() && !include.matches(name, port)) {
                report.passed_over.push_back(where + ": not in btl_xrc_if_include");
                continue;
            }
            if (exclude.matches(name, port)) {
                report.passed_over.push_back(where + ": in btl_xrc_if_exclude");
                continue;
            }
            UsablePort usable{name, port, {}};
            if (ibv_query_port(dev.context.get(), port, &usable.port_attr) != 0) {
                report.passed_over.push_back(where + ": ibv_query_port failed");
                continue;
            }
            if (usable.port_attr.state != IBV_PORT_ACTIVE) {
                report.passed_over.push_back(where + ": port is " + port_state_name(usable.port_attr.state));
                continue;
            }
            if (usable.port_attr.link_layer != IBV_LINK_LAYER_INFINIBAND) {
                report.passed_over.push_back(where + ": link layer is not InfiniBand");
                continue;
            }
            dev.ports.push_back(usable);
        }
        if (!dev.ports.empty()) report.devices.push_back(std::move(dev));
    }
    return report;
}

}  // namespace xrc
