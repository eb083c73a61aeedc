#pragma once
// The test seam for what Runtime cannot take through its public header without exposing internal types: a
// CUDA driver (tests pass the fake one from tests/fake_cuda_driver.hpp). Not installed; tests include src/.
#include "devices/cuda_driver.hpp"
#include "plimsoll/device.hpp"
#include "plimsoll/runtime.hpp"

namespace plimsoll::runtime {

struct RuntimeAccess {
  /// Makes `driver` the runtime's CUDA driver, as if cuda_driver::load had returned it: the GPUs are what
  /// scan_gpus_with(driver) describes now, the host is `host`. Call before the first device is created; the
  /// driver's functions must stay callable for the runtime's life.
  static void inject_driver(Runtime& runtime, const cuda_driver::Api& driver, HostInfo host);
};

}  // namespace plimsoll::runtime
