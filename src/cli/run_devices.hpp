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
  std::uint64_t limit = 0;  // bytes, more than 0
};

/// Parses `--device` (NAME=SIZE entries joined by commas) and adds `--memory-limit` for "cpu" unless an entry
/// names cpu. Throws InvalidArgument naming the bad entry and the expected form: a missing '=', a bad device or
/// size, a simulated device, a device given twice, a limit of 0.
std::vector<RunDevice> parse_run_devices(std::string_view devices, std::string_view memory_limit);

/// "cpu=4294967296;cuda:0=10737418240": the form the child's side reads (PLIMSOLL_RUN_DEVICES).
std::string run_devices_env(const std::vector<RunDevice>& devices);

}  // namespace plimsoll::cli
