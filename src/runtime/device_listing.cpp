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

// Marks `row` as a device that cannot be created: the policy its config asks for, and why not. Every such row is
// made here, so a refused device reads the same wherever the refusal came from.
void mark_refused(DeviceListing& row, const Config& config, const DeviceName& name, const std::string& why) {
  row.policy = config.policy_for(name);
  add_note(row, fmt::format("cannot be created: {}", why));
}

// Fills in the policy and limit `name` would be created with over `physical`; where it cannot be created
// (`refusal`, or planning fails) the row keeps its limit and says why.
void plan_into(DeviceListing& row, const Config& config, const PhysicalDevice& physical, const DeviceName& name,
               const std::optional<std::string>& refusal) {
  if (refusal) return mark_refused(row, config, name, *refusal);
  try {
    const DevicePlan plan = plan_device(config, physical, name);
    row.policy = plan.description.policy;
    row.limit_bytes = plan.description.limit_bytes;
  } catch (const Error& error) {
    mark_refused(row, config, name, error.what());
  }
}

// The physical row of a split device shows the split as a whole: the sum of its logical devices' limits.
void plan_split_into(DeviceListing& row, const Config& config, const PhysicalDevice& physical,
                     const std::vector<LogicalDeviceConfig>& split, const std::optional<std::string>& refusal) {
  const auto configured_sizes = [&] {
    for (const LogicalDeviceConfig& logical : split) row.limit_bytes += logical.memory_limit;
  };
  if (refusal) {
    configured_sizes();
    return mark_refused(row, config, physical.name, *refusal);
  }
  try {
    const Budget budget = compute_budget(physical.name.str(), physical.memory, config.policy_for(physical.name));
    row.policy = budget.policy;
    for (const std::uint64_t limit : logical_limits(physical.name.str(), physical.memory, budget, split))
      row.limit_bytes += limit;
  } catch (const Error&) {
    row.policy = config.policy_for(physical.name);  // the logical rows below say what is wrong
    row.limit_bytes = 0;
    configured_sizes();
  }
}

// `physical`'s row, each followed by its logical devices' rows. `refusal`, when given, is why none of them can be
// created (their GPU's share cannot be taken): every row says so, and they are listed as configured.
void add_device(std::vector<DeviceListing>& rows, const Config& config, const PhysicalDevice& physical,
                bool driver_loaded, const std::optional<std::string>& refusal = std::nullopt) {
  const std::string unbuildable = missing_backing_reason(physical.name, driver_loaded);
  const std::vector<LogicalDeviceConfig>* split = nullptr;
  DeviceListing row = listing_of(physical, physical.name);
  try {
    split = find_logical_split(config, physical.name);
  } catch (const Error& error) {
    // The split itself is malformed: there are no logical devices to list.
    if (refusal) mark_refused(row, config, physical.name, *refusal);
    mark_refused(row, config, physical.name, error.what());
    if (!unbuildable.empty()) add_note(row, unbuildable);
    rows.push_back(std::move(row));
    return;
  }

  if (split == nullptr) {
    plan_into(row, config, physical, physical.name, refusal);
    if (!unbuildable.empty()) add_note(row, unbuildable);
    rows.push_back(std::move(row));
    return;
  }

  // The rows after the physical one are the devices to ask for.
  plan_split_into(row, config, physical, *split, refusal);
  add_note(row, fmt::format("split into {} logical devices", split->size()));
  if (!unbuildable.empty()) add_note(row, unbuildable);
  rows.push_back(std::move(row));
  for (std::size_t i = 0; i < split->size(); ++i) {
    DeviceName name = physical.name;
    name.logical = static_cast<int>(i);
    DeviceListing logical_row = listing_of(physical, name);
    logical_row.details = fmt::format("logical device {} of {}", i, physical.name.str());
    logical_row.limit_bytes = (*split)[i].memory_limit;
    plan_into(logical_row, config, physical, name, refusal);
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
    // A GPU whose share cannot be taken is still listed, as the driver shows it, with every row saying why.
    std::optional<PhysicalDevice> planned;
    std::optional<std::string> refusal;
    try {
      planned = as_planned(physical);
    } catch (const Error& error) {
      refusal = error.what();
    }
    add_device(rows, config, planned.value_or(physical), driver_loaded, refusal);
  }

  std::vector<std::uint64_t> sim_sizes;
  for (const auto& [key, split] : config.logical_devices) add_sim_size(sim_sizes, key);
  for (const auto& [key, policy] : config.device_policies) add_sim_size(sim_sizes, key);
  for (const DeviceName& name : created) add_sim_size(sim_sizes, name.physical().str());
  for (const std::uint64_t size : sim_sizes) add_device(rows, config, describe_sim(size), driver_loaded);
  return rows;
}

}  // namespace plimsoll::runtime
