#pragma once
// The devices of `plimsoll run --device cpu=4GiB,cuda:0=10GiB --memory-limit 8GiB`, parsed and checked before the
// program starts (run_command.cpp).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace plimsoll::cli {

struct RunDevice {
  std::string name;         // canonical ("cpu", "cpu/1", "cuda:0")
  std::uint64_t limit = 0;  // bytes; 0 only for a GPU whose share is a percentage (the driver layer resolves it)
  /// A GPU's share as plimsoll::parse_share_spec reads it ("cuda:0=8GiB:16GiB"): the child runs with the driver
  /// interposer preloaded, so every framework's allocations on that GPU count (docs/sharing.md). Empty for hosts.
  std::string share_spec;
};

/// Parses `--device` (NAME=SIZE entries joined by commas; a GPU's entry may be cuda:N=SHARE[:CAP], sizes or
/// percentages of the GPU) and adds `--memory-limit` for "cpu" unless an entry
/// names cpu. Throws InvalidArgument naming the bad entry and the expected form: a missing '=', a bad device or
/// size, a simulated device, a device given twice, a limit of 0.
std::vector<RunDevice> parse_run_devices(std::string_view devices, std::string_view memory_limit);

/// "cpu=4294967296;cuda:0=10737418240": the form the child's side reads (PLIMSOLL_RUN_DEVICES). A GPU's limit for
/// plimsoll's own allocator (PyTorch's pluggable path) is its cap, else its share; one given as a percentage is left
/// to the driver layer.
std::string run_devices_env(const std::vector<RunDevice>& devices);

}  // namespace plimsoll::cli
