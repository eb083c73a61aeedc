// A tiny C ABI over plimsoll_torch for python_torch_check.py, which loads it with ctypes into a Python process
// that imported torch (Debian's python3-torch links the same libc10 as libtorch-dev, so c10's allocator registry
// is shared). Tests only: the Python module of issue 13 is the real entry point. Devices come from devices.hpp.
#include <cstdio>
#include <exception>

#include "devices.hpp"
#include "plimsoll/torch.hpp"

namespace {

// 0 on success, 1 when install threw (the message on stderr).
int guarded(void (*body)()) noexcept {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plimsoll test shim: %s\n", e.what());
    return 1;
  }
}

}  // namespace

extern "C" {

/// Installs plimsoll with cpu/0 (1 GiB) as the default device.
__attribute__((visibility("default"))) int plimsoll_test_install() {
  return guarded([] { plimsoll::torch::install(plimsoll::torch_test::main_device()); });
}

/// Installs plimsoll with cpu/2 (8 MiB limit) as the default device, for out-of-memory.
__attribute__((visibility("default"))) int plimsoll_test_install_small() {
  return guarded([] { plimsoll::torch::install(plimsoll::torch_test::small_device()); });
}

/// 1 when `ptr` is a live allocation of cpu/0 or cpu/2.
__attribute__((visibility("default"))) int plimsoll_test_owns(const void* ptr) {
  return plimsoll::torch_test::owns(plimsoll::torch_test::main_device(), ptr) ||
                 plimsoll::torch_test::owns(plimsoll::torch_test::small_device(), ptr)
             ? 1
             : 0;
}

/// plimsoll::torch::installed_allocator_overridden().
__attribute__((visibility("default"))) int plimsoll_test_overridden() {
  return plimsoll::torch::installed_allocator_overridden() ? 1 : 0;
}

}  // extern "C"
