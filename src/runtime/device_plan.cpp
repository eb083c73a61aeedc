#include "runtime/device_plan.hpp"

#include <fmt/format.h>

#include "plimsoll/error.hpp"

namespace plimsoll::runtime {
namespace {

std::string logical_names(const DeviceName& physical, std::size_t count) {
  DeviceName first = physical;
  first.logical = 0;
  if (count == 1) return first.str();
  DeviceName last = physical;
  last.logical = static_cast<int>(count - 1);
  return fmt::format("{} .. {}", first.str(), last.str());
}

}  // namespace

PhysicalDevice describe_visible_gpu(const VisibleGpus& gpus, std::size_t index) {
  PhysicalDevice gpu = describe_gpu(gpus.gpus[index]);
  gpu.driver_ordinal = index < gpus.cuda_ordinals.size() ? gpus.cuda_ordinals[index] : static_cast<int>(index);
  return gpu;
}

std::optional<PhysicalDevice> find_physical(const VisibleGpus& gpus, const HostInfo& host,
                                            const DeviceName& physical) {
  switch (physical.kind) {
    case DeviceKind::cpu:
      return physical.pinned ? describe_pinned_host(host) : describe_host(host);
    case DeviceKind::sim:
      return describe_sim(physical.sim_bytes);
    case DeviceKind::cuda:
      if (physical.index >= 0 && static_cast<std::size_t>(physical.index) < gpus.gpus.size())
        return describe_visible_gpu(gpus, static_cast<std::size_t>(physical.index));
      return std::nullopt;
  }
  return std::nullopt;
}

const std::vector<LogicalDeviceConfig>* find_logical_split(const Config& config, const DeviceName& physical) {
  for (const auto& [key, split] : config.logical_devices) {
    DeviceName configured;
    try {
      configured = DeviceName::parse(key);
    } catch (const InvalidArgument& error) {
      throw InvalidArgument(fmt::format("logical_devices entry \"{}\": {}", key, error.what()));
    }
    if (configured.logical >= 0) {
      throw InvalidArgument(fmt::format(
          "logical_devices entry \"{}\" names a logical device; split a physical device instead (\"{}\")", key,
          configured.physical().str()));
    }
    if (configured == physical) return &split;
  }
  return nullptr;
}

DevicePlan plan_device(const Config& config, const PhysicalDevice& physical, const DeviceName& name) {
  const std::string physical_name = physical.name.str();
  const std::vector<LogicalDeviceConfig>* split = find_logical_split(config, physical.name);
  DevicePlan plan;
  plan.description.name = name.str();
  plan.description.hardware = physical.hardware;
  plan.description.total_bytes = physical.memory.total_bytes;

  if (name.logical < 0) {
    if (split != nullptr) {
      throw InvalidArgument(fmt::format(
          "{} is split into {} logical devices (logical_devices in the config); ask for {} instead",
          physical_name, split->size(), logical_names(physical.name, split->size())));
    }
    const Budget budget = compute_budget(physical_name, physical.memory, config.policy_for(name));
    plan.description.policy = budget.policy;
    plan.description.limit_bytes = budget.limit_bytes;
    return plan;
  }

  if (split == nullptr) {
    throw DeviceUnavailable(fmt::format(
        "{} does not exist: {} is not split into logical devices; ask for {}, or split it in the config "
        "(\"devices\": {{\"{}\": {{\"logical_devices\": [\"4GiB\", \"4GiB\"]}}}})",
        plan.description.name, physical_name, physical_name, physical_name));
  }
  const auto index = static_cast<std::size_t>(name.logical);
  if (index >= split->size()) {
    throw DeviceUnavailable(fmt::format(
        "{} does not exist: {} is split into {} logical devices; ask for {}, or add more to its logical_devices",
        plan.description.name, physical_name, split->size(), logical_names(physical.name, split->size())));
  }
  // The physical device's policy sets the reserve, which the split as a whole must leave free.
  const Budget physical_budget = compute_budget(physical_name, physical.memory, config.policy_for(physical.name));
  const std::vector<std::uint64_t> limits = logical_limits(physical_name, physical.memory, physical_budget, *split);

  // The split's size is the logical device's limit; a limit or fraction inherited from the default policy
  // (PLIMSOLL_MEMORY_LIMIT, say) is meant for whole devices and yields to it.
  Policy policy = config.policy_for(name);
  policy.memory_limit = limits[index];
  policy.memory_fraction.reset();
  policy.reserve = physical_budget.reserve_bytes;
  policy.validate();
  plan.description.policy = policy;
  plan.description.limit_bytes = limits[index];
  plan.logical = true;
  return plan;
}

}  // namespace plimsoll::runtime
