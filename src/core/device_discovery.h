// SPDX-License-Identifier: BSD-3-Clause
// Finds the device ports the BTL can use: ACTIVE ports of devices that advertise XRC, after the admin's
// include/exclude filters. Everything it passes over is recorded with the reason, so that a job that ends up
// with no usable port can say what it found.
#pragma once

#include "port_filter.h"
#include "verbs_owners.h"

#include <cstdint>
#include <string>
#include <vector>

namespace xrc {

struct UsablePort {
    std::string device;
    std::uint8_t port = 0;
    ibv_port_attr port_attr{};
};

// One opened device with at least one usable port (the context stays open for the modules built on it).
struct OpenedDevice {
    std::string name;
    ContextPtr context;
    ibv_device_attr device_attr{};
    std::vector<UsablePort> ports;
};

struct DiscoveryReport {
    std::vector<OpenedDevice> devices;
    std::vector<std::string> passed_over;  // "mlx5_0:1: port is DOWN", "mlx4_0: no XRC support", ...
    std::vector<std::string> device_names; // every device the verbs library listed
    std::string error;                     // a configuration error (unknown device in a filter)

    std::size_t usable_port_count() const noexcept;
};

DiscoveryReport discover_xrc_ports(const PortFilter &include, const PortFilter &exclude);

const char *port_state_name(ibv_port_state state) noexcept;

}  // namespace xrc
