#pragma once
// The choice between the two CUDA backings, in one place for the runtime: the growable segment where the
// driver and device support virtual memory management, else plain cuMemAlloc regions (preallocate only).
#include <memory>
#include <string>

#include "backings/backing.hpp"
#include "devices/cuda_driver.hpp"

namespace plimsoll::backings {

struct CudaBackingChoice {
  std::unique_ptr<Backing> backing;
  bool growable = false;        // CudaVmmBacking: on_demand works; false: CudaRegionBacking, preallocate only
  std::string fallback_reason;  // why plain regions (for the "created device" line); empty when growable
};

/// Probes `device` (cuda_driver::vmm_unsupported_reason) and builds the backing that fits. Throws
/// DeviceUnavailable when neither can be built (no cuMemAlloc, or the context is refused).
CudaBackingChoice make_cuda_backing(const cuda_driver::Api& api, cuda_driver::Device device);

}  // namespace plimsoll::backings
