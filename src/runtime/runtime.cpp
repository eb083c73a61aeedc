#include "plimsoll/runtime.hpp"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "runtime/device_plan.hpp"
#include "runtime/device_listing.hpp"
#include "runtime/gpu_visibility.hpp"
#include "runtime/physical_device.hpp"
#include "runtime/shared_backing.hpp"

namespace plimsoll {
namespace {

std::optional<std::string> environment_value(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

}  // namespace

struct Runtime::Impl {
  explicit Impl(Config initial) : config(std::move(initial)) {}

  mutable std::mutex mutex;
  Config config;
  std::optional<runtime::Hardware> hardware;
  // Declared before `devices` so that logical devices' allocators are destroyed before the backing they share.
  std::map<std::string, std::unique_ptr<runtime::SharedBacking>> shared_backings;
  std::map<std::string, std::unique_ptr<Allocator>> devices;
  std::set<std::string> fallback_noticed;

  const runtime::Hardware& scanned_hardware() {
    if (!hardware) hardware = runtime::Hardware{scan_gpus(), scan_host()};
    return *hardware;
  }

  runtime::VisibleGpus visible_gpus() {
    return runtime::select_visible_gpus(scanned_hardware().scan, config.visible_devices);
  }

  Allocator& device_locked(const DeviceName& name) {
    const std::string key = name.str();
    if (const auto found = devices.find(key); found != devices.end()) return *found->second;

    const runtime::VisibleGpus gpus = visible_gpus();
    const std::optional<runtime::PhysicalDevice> physical =
        runtime::find_physical(gpus, scanned_hardware().host, name.physical());
    std::string missing;
    if (!physical) {
      missing = runtime::why_gpu_missing(gpus, name.index, environment_value("CUDA_VISIBLE_DEVICES"));
    } else {
      missing = runtime::missing_backing_reason(name.kind);
    }
    if (!missing.empty()) return fall_back_or_throw(key, missing, gpus);

    const runtime::DevicePlan plan = runtime::plan_device(config, *physical, name);
    std::unique_ptr<backings::Backing> backing;
    if (plan.logical) {
      auto& shared = shared_backings[physical->name.str()];
      if (!shared) shared = std::make_unique<runtime::SharedBacking>(runtime::make_backing(*physical));
      backing = shared->view();
    } else {
      backing = runtime::make_backing(*physical);
    }
    auto allocator = std::make_unique<Allocator>(plan.description, std::move(backing));
    if (config.log_device_creation) fmt::print(stderr, "{}\n", allocator->description().summary());
    Allocator& created = *allocator;
    devices.emplace(key, std::move(allocator));
    return created;
  }

  Allocator& fall_back_or_throw(const std::string& requested, const std::string& reason,
                                const runtime::VisibleGpus& gpus) {
    if (!config.cpu_fallback) {
      std::string choices = "cpu";
      if (runtime::missing_backing_reason(DeviceKind::cuda).empty()) {
        for (const GpuInfo& gpu : gpus.gpus) choices += fmt::format(", cuda:{}", gpu.ordinal);
      }
      throw DeviceUnavailable(fmt::format(
          "{} is not available: {}; use one of: {}; or enable cpu_fallback (PLIMSOLL_CPU_FALLBACK=1)", requested,
          reason, choices));
    }
    // Once per name: a training loop asking for cuda:0 every step must not flood the log.
    if (fallback_noticed.insert(requested).second) {
      fmt::print(stderr, "plimsoll: {} is not available ({}); falling back to cpu\n", requested, reason);
    }
    return device_locked(DeviceName{});
  }
};

Runtime::Runtime(Config config) : impl_(std::make_unique<Impl>(std::move(config))) {}

Runtime::~Runtime() = default;

Runtime& Runtime::global() {
  // Never destroyed: memory handed out through the C API or held by other static objects may be freed while
  // the process exits, after a destroyed runtime would have unmapped it.
  static Runtime* const runtime = new Runtime(apply_environment(Config{}));
  return *runtime;
}

Allocator& Runtime::device(std::string_view name) { return device(DeviceName::parse(name)); }

Allocator& Runtime::device(const DeviceName& name) {
  std::lock_guard lock(impl_->mutex);
  return impl_->device_locked(name);
}

std::vector<DeviceListing> Runtime::list_devices() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<DeviceName> created;
  for (const auto& [key, allocator] : impl_->devices) created.push_back(DeviceName::parse(key));
  return runtime::list_devices(impl_->config, impl_->visible_gpus(), impl_->scanned_hardware().host, created);
}

std::vector<std::string> Runtime::visibility_report() const {
  std::lock_guard lock(impl_->mutex);
  return runtime::explain_visibility(impl_->visible_gpus(), environment_value("CUDA_VISIBLE_DEVICES"));
}

const Config& Runtime::config() const noexcept { return impl_->config; }

void Runtime::configure(std::string_view device, const Policy& policy) {
  const DeviceName name = DeviceName::parse(device);
  policy.validate();
  std::lock_guard lock(impl_->mutex);
  const std::string key = name.str();
  if (const auto found = impl_->devices.find(key); found != impl_->devices.end()) {
    // Work the new policy out against the same hardware, so its defaults and limit checks apply as at creation.
    Config changed = impl_->config;
    changed.device_policies[key] = policy;
    const runtime::VisibleGpus gpus = impl_->visible_gpus();
    const auto physical = runtime::find_physical(gpus, impl_->scanned_hardware().host, name.physical());
    if (!physical) {
      throw InvalidState(fmt::format("{} was created but its hardware is no longer visible; configure it before "
                                     "changing PLIMSOLL_VISIBLE_DEVICES",
                                     key));
    }
    const DeviceDescription planned = runtime::plan_device(changed, *physical, name).description;
    // Allocator::set_policy derives a limit only from memory_limit or memory_fraction (of the total); the runtime's
    // rules (free - reserve, the host's cgroup ceiling) are handed over as the limit they come to.
    Policy effective = planned.policy;
    effective.memory_limit = planned.limit_bytes;
    effective.memory_fraction.reset();
    found->second->set_policy(effective);
    impl_->config = std::move(changed);
    return;
  }
  impl_->config.device_policies[key] = policy;
}

Policy Runtime::policy_for(std::string_view device) const {
  const DeviceName name = DeviceName::parse(device);
  std::lock_guard lock(impl_->mutex);
  return impl_->config.policy_for(name);
}

void Runtime::replace_config(Config config) {
  std::lock_guard lock(impl_->mutex);
  if (!impl_->devices.empty()) {
    std::string names;
    for (const auto& [key, allocator] : impl_->devices) names += (names.empty() ? "" : ", ") + key;
    throw InvalidState(fmt::format(
        "the config cannot be replaced after devices were created ({}): their policies are fixed; load the config "
        "before the first device is used, or change one device with plimsoll_configure",
        names));
  }
  impl_->config = std::move(config);
}

void Runtime::inject_hardware(GpuScan gpus, HostInfo host) {
  std::lock_guard lock(impl_->mutex);
  impl_->hardware = runtime::Hardware{std::move(gpus), std::move(host)};
}

}  // namespace plimsoll
