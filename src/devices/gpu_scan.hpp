#pragma once
// The GPU scan once the driver is loaded, apart from loading it, so tests can hand it a fake driver.
#include "devices/cuda_driver.hpp"
#include "plimsoll/device.hpp"

namespace plimsoll {

/// Initialises the driver behind `api` and describes every GPU it shows; any failed call becomes the reason.
GpuScan scan_gpus_with(const cuda_driver::Api& api);

}  // namespace plimsoll
