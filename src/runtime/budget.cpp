#include "runtime/budget.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"
#include "util/checked_math.hpp"

namespace plimsoll::runtime {
namespace {

std::uint64_t saturating_minus(std::uint64_t a, std::uint64_t b) { return a > b ? a - b : 0; }

std::string what_the_device_can_give(const Budget& budget, const PhysicalMemory& memory) {
  return fmt::format("{} {} - {} reserve = {}", format_size(memory.ceiling_bytes),
                     memory.kind == DeviceKind::cpu ? "host limit" : "total", format_size(budget.reserve_bytes),
                     format_size(budget.capacity_bytes));
}

std::uint64_t fraction_of(double fraction, std::uint64_t bytes) {
  const double product = std::floor(fraction * static_cast<double>(bytes));
  // Policy::validate keeps fractions in (0, 1], so the product fits; the guard is for NaN or rounding.
  if (!(product >= 0.0)) return 0;
  if (product >= static_cast<double>(std::numeric_limits<std::uint64_t>::max())) return bytes;
  return static_cast<std::uint64_t>(product);
}

}  // namespace

std::uint64_t default_reserve_for(const PhysicalMemory& memory) {
  const std::uint64_t total = memory.ceiling_bytes;
  if (memory.kind != DeviceKind::cuda || memory.compute_major <= 0) return default_reserve(memory.kind, total);
  // TensorFlow's floors track the context and library workspaces, which grow with each architecture; it
  // compares the free memory with 2 GiB, the total is used here so that the reserve does not move with what
  // other processes hold at the moment.
  constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
  std::uint64_t floor = 1536 * kMiB;
  if (total < 2048 * kMiB) floor = 225 * kMiB;
  else if (memory.compute_major <= 6) floor = 500 * kMiB;
  else if (memory.compute_major == 7) floor = 1050 * kMiB;
  return std::min(std::max(floor, total / 20), total / 4);
}

Budget compute_budget(const std::string& device, const PhysicalMemory& memory, const Policy& policy) {
  policy.validate();
  Budget budget;
  budget.policy = policy;
  const bool reserve_given = policy.reserve.has_value();
  budget.reserve_bytes = reserve_given ? *policy.reserve : default_reserve_for(memory);
  if (budget.reserve_bytes >= memory.ceiling_bytes && memory.ceiling_bytes > 0) {
    throw InvalidArgument(fmt::format(
        "{}reserve {} for {} leaves nothing of the device's {} {}; {}", reserve_given ? "" : "the default ",
        format_size(budget.reserve_bytes), device, format_size(memory.ceiling_bytes),
        memory.kind == DeviceKind::cpu ? "host limit" : "total",
        reserve_given ? "lower reserve" : "set a smaller reserve explicitly (PLIMSOLL_RESERVE or \"reserve\")"));
  }
  budget.policy.reserve = budget.reserve_bytes;
  budget.capacity_bytes = saturating_minus(memory.ceiling_bytes, budget.reserve_bytes);

  if (policy.memory_limit) {
    budget.limit_bytes = *policy.memory_limit;
    if (budget.limit_bytes > budget.capacity_bytes) {
      throw InvalidArgument(fmt::format("memory_limit {} for {} exceeds what the device can give ({}); lower it",
                                        format_size(budget.limit_bytes), device,
                                        what_the_device_can_give(budget, memory)));
    }
  } else if (policy.memory_fraction) {
    budget.limit_bytes = fraction_of(*policy.memory_fraction, memory.ceiling_bytes);
    if (budget.limit_bytes > budget.capacity_bytes) {
      throw InvalidArgument(fmt::format(
          "memory_fraction {} ({}) for {} exceeds what the device can give ({}); lower the fraction or the reserve",
          *policy.memory_fraction, format_size(budget.limit_bytes), device,
          what_the_device_can_give(budget, memory)));
    }
  } else if (memory.kind == DeviceKind::cuda) {
    // A GPU shared with other processes: take what is free now, never what they hold. Under a share
    // (PLIMSOLL_SHARE) the memory is the GPU as the share lets this process see it (gpu_sharing.hpp): the cap as
    // its total, and what the ledger would charge it as its free memory; the interposer answers cuMemGetInfo the
    // same way, so one rule gives both the same budget.
    budget.limit_bytes = saturating_minus(std::min(memory.free_bytes, memory.ceiling_bytes), budget.reserve_bytes);
  } else if (memory.pinned) {
    budget.limit_bytes = std::min(budget.capacity_bytes, memory.ceiling_bytes / kPinnedDefaultShareDivisor);
  } else {
    budget.limit_bytes = budget.capacity_bytes;
  }
  return budget;
}

std::vector<std::uint64_t> logical_limits(const std::string& device, const PhysicalMemory& memory,
                                          const Budget& physical, const std::vector<LogicalDeviceConfig>& split) {
  if (split.empty()) {
    throw InvalidArgument(fmt::format(
        "logical_devices for {} is an empty list; list at least one memory limit (e.g. [\"4GiB\", \"4GiB\"]) "
        "or remove the entry",
        device));
  }
  std::uint64_t sized_sum = 0;
  std::size_t equal_count = 0;
  std::string terms;
  for (std::size_t i = 0; i < split.size(); ++i) {
    if (!terms.empty()) terms += " + ";
    if (split[i].equal_share) {
      ++equal_count;
      terms += "equal";
      continue;
    }
    const std::uint64_t limit = split[i].memory_limit;
    if (limit == 0) {
      throw InvalidArgument(fmt::format(
          "logical device {}/{} has a memory limit of 0 bytes; give every logical device a size, e.g. \"4GiB\", "
          "or \"equal\" for an equal share",
          device, i));
    }
    sized_sum = util::saturating_add(sized_sum, limit);
    terms += format_size(limit);
  }
  if (sized_sum > physical.capacity_bytes) {
    throw InvalidArgument(fmt::format(
        "the {} logical devices of {} ask for {} in total ({}), more than the device can give ({}); lower their "
        "memory limits so they sum to at most {}",
        split.size(), device, format_size(sized_sum), terms, what_the_device_can_give(physical, memory),
        format_size(physical.capacity_bytes)));
  }

  std::uint64_t share = 0;
  if (equal_count > 0) {
    // Equal shares divide the physical device's limit (its memory_limit, fraction or default), not its
    // capacity: the physical policy still says how much of the device this process takes.
    const std::uint64_t left = saturating_minus(physical.limit_bytes, sized_sum);
    share = left / equal_count;
    constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
    if (share >= kMiB) share -= share % kMiB;
    if (share == 0) {
      throw InvalidArgument(fmt::format(
          "the {} equal-share logical devices of {} get nothing: its limit {} leaves {} after the sized ones ({}); "
          "raise the physical device's memory_limit, lower the sized logical devices, or use fewer devices",
          equal_count, device, format_size(physical.limit_bytes), format_size(left), terms));
    }
  }
  std::vector<std::uint64_t> limits;
  limits.reserve(split.size());
  for (const LogicalDeviceConfig& logical : split) limits.push_back(logical.equal_share ? share : logical.memory_limit);
  return limits;
}

}  // namespace plimsoll::runtime
