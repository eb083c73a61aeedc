// The README's "Using the library" example as a program that checks what it claims. The README must show these
// lines in this order (tests/integrations_readme_test.cpp); ctest runs the program.
#include <cstddef>
#include <iostream>

#include <plimsoll/plimsoll.hpp>

int main() {
  plimsoll::Config config = plimsoll::apply_environment(plimsoll::Config{});  // PLIMSOLL_* variables
  config.default_policy.memory_limit = plimsoll::parse_size("6GiB");
  plimsoll::Runtime runtime(config);
  plimsoll::Allocator& gpu = runtime.device("sim:16GiB");   // or "cpu", "cuda:0", "cpu/1" (a logical device)

  void* weights = gpu.allocate(512 << 20, "weights");
  bool out_of_memory = false;
  try {
    gpu.allocate(std::size_t{8} << 30, "activations");
  } catch (const plimsoll::OutOfMemory& oom) {
    std::cerr << oom.what();            // request, limit, in use, reserved, largest free block, top tags, cause, fix
    out_of_memory = oom.details().cause == plimsoll::OomCause::limit_too_low;
  }
  plimsoll::Stats stats = gpu.stats();  // in use, peaks, reserved, largest free block, maps/unmaps, per-tag bytes
  const bool counted = stats.in_use_bytes == (512u << 20) && stats.ooms == 1 && !stats.tags.empty() &&
                       stats.tags.front().tag == "weights";
  gpu.deallocate(weights);
  gpu.trim();                            // give cached memory back to the device

  const bool released = gpu.stats().reserved_bytes == 0;
  std::cout << "quickstart: out of memory reported " << out_of_memory << ", stats counted " << counted
            << ", memory given back " << released << '\n';
  return out_of_memory && counted && released ? 0 : 1;
}
