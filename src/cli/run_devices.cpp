#include "cli/run_devices.hpp"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "cli/option_values.hpp"
#include "plimsoll/device.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/sharing.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll::cli {
namespace {

// The host device maps memory in 2 MiB granules: a smaller host limit cannot hold the program's first array.
constexpr std::uint64_t kMinimumHostLimit = std::uint64_t{2} << 20;

void check_host_minimum(const RunDevice& device, std::string_view option) {
  if (device.name.rfind("cpu", 0) == 0 && device.limit < kMinimumHostLimit) {
    throw InvalidArgument(fmt::format("{} gives {} a limit of {}, below {}: the host device maps memory in 2 MiB "
                                      "granules, so the program's first NumPy array or tensor could not be made; "
                                      "give at least 2MiB (a Python training job needs its batches, weights and "
                                      "activations on top)",
                                      option, device.name, format_size(device.limit),
                                      format_size(kMinimumHostLimit)));
  }
}

RunDevice parse_entry(std::string_view entry) {
  const std::size_t equals = entry.find('=');
  if (equals == std::string_view::npos) {
    throw InvalidArgument(fmt::format("--device entry \"{}\" has no '=': write NAME=SIZE entries joined by commas, "
                                      "e.g. --device cpu=4GiB,cuda:0=10GiB",
                                      entry));
  }
  const std::string option = fmt::format("--device entry \"{}\"", entry);
  const DeviceName name = cli::for_option(option, [&] { return DeviceName::parse(entry.substr(0, equals)); });
  if (name.kind == DeviceKind::sim) {
    throw InvalidArgument(fmt::format("--device entry \"{}\": a simulated device holds no tensor of a Python "
                                      "program; give cpu, cpu/K or cuda:N",
                                      entry));
  }
  if (name.kind == DeviceKind::cuda) {
    // A GPU's entry is a share, perhaps with a cap: governed at the driver for any framework (docs/sharing.md).
    const ShareSpec spec = cli::for_option("--device", [&] { return parse_share_spec(entry); });
    const std::string& bound = spec.cap.empty() ? spec.share : spec.cap;
    RunDevice device;
    device.name = name.str();
    device.share_spec = spec.str();
    device.limit = bound.ends_with('%') ? 0 : cli::for_option(option, [&] { return parse_size(bound); });
    return device;
  }
  const std::uint64_t limit = cli::for_option(option, [&] { return parse_size(entry.substr(equals + 1)); });
  if (limit == 0) {
    throw InvalidArgument(fmt::format("--device entry \"{}\": a limit of 0 bytes holds nothing; give a size such as "
                                      "4GiB",
                                      entry));
  }
  RunDevice device;
  device.name = name.str();
  device.limit = limit;
  return device;
}

}  // namespace

std::vector<RunDevice> parse_run_devices(std::string_view devices, std::string_view memory_limit) {
  std::vector<RunDevice> out;
  while (!devices.empty()) {
    const std::size_t comma = devices.find(',');
    const std::string_view entry = devices.substr(0, comma);
    devices = comma == std::string_view::npos ? std::string_view() : devices.substr(comma + 1);
    if (entry.empty()) continue;
    RunDevice device = parse_entry(entry);
    check_host_minimum(device, "--device");
    if (std::any_of(out.begin(), out.end(), [&](const RunDevice& d) { return d.name == device.name; })) {
      throw InvalidArgument(fmt::format("--device names {} twice; give each device once", device.name));
    }
    out.push_back(std::move(device));
  }
  if (!memory_limit.empty()) {
    const std::uint64_t limit = cli::for_option("--memory-limit", [&] { return parse_size(memory_limit); });
    if (limit == 0) throw InvalidArgument("--memory-limit 0 holds nothing; give a size such as 4GiB");
    if (std::any_of(out.begin(), out.end(), [](const RunDevice& d) { return d.name == "cpu"; })) {
      throw InvalidArgument("--memory-limit and a cpu entry of --device both set the host's limit; give one");
    }
    RunDevice host;
    host.name = "cpu";
    host.limit = limit;
    check_host_minimum(host, "--memory-limit");
    out.push_back(std::move(host));
  }
  return out;
}

std::string run_devices_env(const std::vector<RunDevice>& devices) {
  std::string out;
  for (const RunDevice& device : devices) {
    if (device.limit == 0) continue;  // a GPU share in percent: the driver layer's alone
    out += fmt::format("{}{}={}", out.empty() ? "" : ";", device.name, device.limit);
  }
  return out;
}

}  // namespace plimsoll::cli
