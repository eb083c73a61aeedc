#include <limits>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "plimsoll/device.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll {
namespace {

constexpr std::string_view kAcceptedForms =
    "expected cpu, cpu-pinned, cuda:N or sim:SIZE (e.g. sim:16GiB), optionally /K for logical device K";

[[noreturn]] void reject(std::string_view text, std::string_view problem = {}) {
  if (problem.empty()) throw InvalidArgument(fmt::format("invalid device \"{}\": {}", text, kAcceptedForms));
  throw InvalidArgument(fmt::format("invalid device \"{}\": {}; {}", text, problem, kAcceptedForms));
}

/// A non-negative decimal int: digits only, so "+1", "-1", " 1" and "0x1" are all refused.
std::optional<int> parse_index(std::string_view digits) {
  if (digits.empty()) return std::nullopt;
  int value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    const int digit = c - '0';
    if (value > (std::numeric_limits<int>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

}  // namespace

DeviceName DeviceName::parse(std::string_view text) {
  DeviceName name;
  std::string_view base = text;
  if (const auto slash = text.rfind('/'); slash != std::string_view::npos) {
    const auto logical = parse_index(text.substr(slash + 1));
    if (!logical) reject(text, "the logical device after '/' must be a whole number such as /0 or /1");
    name.logical = *logical;
    base = text.substr(0, slash);
  }

  constexpr std::string_view kCuda = "cuda:";
  constexpr std::string_view kSim = "sim:";
  if (base == "cpu") {
    name.kind = DeviceKind::cpu;
  } else if (base == "cpu-pinned") {
    name.kind = DeviceKind::cpu;
    name.pinned = true;
  } else if (base.starts_with(kCuda)) {
    const auto index = parse_index(base.substr(kCuda.size()));
    if (!index) reject(text, "the GPU index after cuda: must be a whole number such as cuda:0");
    name.kind = DeviceKind::cuda;
    name.index = *index;
  } else if (base.starts_with(kSim)) {
    name.kind = DeviceKind::sim;
    try {
      name.sim_bytes = parse_size(base.substr(kSim.size()));
    } catch (const InvalidArgument& size_error) {
      reject(text, size_error.what());
    }
    if (name.sim_bytes == 0) reject(text, "a simulated device needs more than 0 bytes");
  } else {
    reject(text);
  }
  return name;
}

std::string DeviceName::str() const {
  std::string text;
  switch (kind) {
    case DeviceKind::cpu:
      text = pinned ? "cpu-pinned" : "cpu";
      break;
    case DeviceKind::cuda:
      text = fmt::format("cuda:{}", index);
      break;
    case DeviceKind::sim: {
      // The largest binary unit that divides exactly, so parse(str()) gives back the same bytes.
      constexpr std::string_view kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
      std::uint64_t amount = sim_bytes;
      std::size_t unit = 0;
      while (unit + 1 < std::size(kUnits) && amount != 0 && amount % 1024 == 0) {
        amount /= 1024;
        ++unit;
      }
      text = unit == 0 ? fmt::format("sim:{}", amount) : fmt::format("sim:{}{}", amount, kUnits[unit]);
      break;
    }
  }
  if (logical >= 0) text += fmt::format("/{}", logical);
  return text;
}

}  // namespace plimsoll
