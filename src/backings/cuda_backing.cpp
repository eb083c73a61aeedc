#include "backings/cuda_backing.hpp"

#include "backings/cuda_region_backing.hpp"
#include "backings/cuda_vmm_backing.hpp"

namespace plimsoll::backings {

CudaBackingChoice make_cuda_backing(const cuda_driver::Api& api, cuda_driver::Device device) {
  CudaBackingChoice choice;
  choice.fallback_reason = cuda_driver::vmm_unsupported_reason(api, device);
  if (choice.fallback_reason.empty()) {
    choice.backing = std::make_unique<CudaVmmBacking>(api, device);
    choice.growable = true;
  } else {
    choice.backing = std::make_unique<CudaRegionBacking>(api, device);
  }
  return choice;
}

}  // namespace plimsoll::backings
