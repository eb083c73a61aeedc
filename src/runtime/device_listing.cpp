#include "runtime/device_listing.hpp"

#include <optional>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "runtime/device_plan.hpp"
#include "runtime/physical_device.hpp"

namespace plimsoll::runtime {
namespace {

DeviceListing listing_of(const PhysicalDevice& physical, const DeviceName& name) {
  DeviceListing row;
  row.name = name.str();
  row.hardware = physical.hardware;
  row.total_bytes = physical.memory.total_bytes;
  row.free_bytes = physical.memory.free_bytes;
  row.details = physical.details;
  return row;
}

void add_note(DeviceListing& row, const std::string& note) {
  row.details += row.details.empty() ? note : "; " + note;
}

void add_device(std::vector<DeviceListing>& rows, const Config& config, const PhysicalDevice& physical,
                bool driver_loaded) {
  const std::string unbuildable = missing_backing_reason(physical.name, driver_loaded);
  const std::vector<LogicalDeviceConfig>* split = nullptr;
  try {
    split = find_logical_split(config, physical.name);
  } catch (const Error& error) {
    DeviceListing row = listing_of(physical, physical.name);
    add_note(row, fmt::format("cannot be created: {}", error.what()));
    rows.push_back(std::move(row));
    return;
  }

  DeviceListing row = listing_of(physical, physical.name);
  if (split == nullptr) {
    try {
      const DevicePlan plan = plan_device(config, physical, physical.name);
      row.policy = plan.description.policy;
      row.limit_bytes = plan.description.limit_bytes;
    } catch (const Error& error) {
      row.policy = config.policy_for(physical.name);
      add_note(row, fmt::format("cannot be created: {}", error.what()));
    }
    if (!unbuildable.empty()) add_note(row, unbuildable);
    rows.push_back(std::move(row));
    return;
  }

  // The physical row shows the split as a whole; the rows after it are the devices to ask for.
  try {
    const Budget budget = compute_budget(physical.name.str(), physical.memory, config.policy_for(physical.name));
    row.policy = budget.policy;
    for (const std::uint64_t limit : logical_limits(physical.name.str(), physical.memory, budget, *split))
      row.limit_bytes += limit;
  } catch (const Error&) {
    row.policy = config.policy_for(physical.name);  // the logical rows below say what is wrong
    for (const LogicalDeviceConfig& logical : *split) row.limit_bytes += logical.memory_limit;
  }
  add_note(row, fmt::format("split into {} logical devices", split->size()));
  if (!unbuildable.empty()) add_note(row, unbuildable);
  rows.push_back(std::move(row));
  for (std::size_t i = 0; i < split->size(); ++i) {
    DeviceName name = physical.name;
    name.logical = static_cast<int>(i);
    DeviceListing logical_row = listing_of(physical, name);
    logical_row.details = fmt::format("logical device {} of {}", i, physical.name.str());
    try {
      const DevicePlan plan = plan_device(config, physical, name);
      logical_row.policy = plan.description.policy;
      logical_row.limit_bytes = plan.description.limit_bytes;
    } catch (const Error& error) {
      logical_row.policy = config.policy_for(name);
      logical_row.limit_bytes = (*split)[i].memory_limit;
      add_note(logical_row, fmt::format("cannot be created: {}", error.what()));
    }
    rows.push_back(std::move(logical_row));
  }
}

void add_sim_size(std::vector<std::uint64_t>& sizes, const std::string& key) {
  try {
    const DeviceName name = DeviceName::parse(key);
    if (name.kind != DeviceKind::sim) return;
    for (const std::uint64_t size : sizes) {
      if (size == name.sim_bytes) return;
    }
    sizes.push_back(name.sim_bytes);
  } catch (const InvalidArgument&) {
    // A key that names no device is reported where it is used (device creation); listing goes on.
  }
}

}  // namespace

std::vector<DeviceListing> list_devices(const Config& config, const VisibleGpus& gpus, const HostInfo& host,
                                        const std::vector<DeviceName>& created, bool driver_loaded,
                                        const GpuView& as_planned) {
  std::vector<DeviceListing> rows;
  add_device(rows, config, describe_host(host), driver_loaded);
  // Pinned host memory is page-locked through the driver, so it is listed where a driver and a GPU are.
  if (driver_loaded && !gpus.gpus.empty()) add_device(rows, config, describe_pinned_host(host), driver_loaded);
  for (std::size_t index = 0; index < gpus.gpus.size(); ++index) {
    const PhysicalDevice physical = describe_visible_gpu(gpus, index);
    std::optional<PhysicalDevice> planned;
    try {
      planned = as_planned(physical);
    } catch (const Error& error) {
      DeviceListing row = listing_of(physical, physical.name);
      row.policy = config.policy_for(physical.name);
      add_note(row, fmt::format("cannot be created: {}", error.what()));
      rows.push_back(std::move(row));
      continue;
    }
    add_device(rows, config, *planned, driver_loaded);
  }

  std::vector<std::uint64_t> sim_sizes;
  for (const auto& [key, split] : config.logical_devices) add_sim_size(sim_sizes, key);
  for (const auto& [key, policy] : config.device_policies) add_sim_size(sim_sizes, key);
  for (const DeviceName& name : created) add_sim_size(sim_sizes, name.physical().str());
  for (const std::uint64_t size : sim_sizes) add_device(rows, config, describe_sim(size), driver_loaded);
  return rows;
}

}  // namespace plimsoll::runtime
