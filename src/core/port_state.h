// What a BTL module keeps of the device port it drives. Several modules (ports) share one opened device.
#pragma once

#include "device_discovery.h"

#include <memory>

namespace xrc {

struct PortState {
    std::shared_ptr<OpenedDevice> device;
    UsablePort port;
};

}  // namespace xrc
