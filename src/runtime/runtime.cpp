#include "plimsoll/runtime.hpp"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "devices/gpu_scan.hpp"
#include "engine/fork_handlers.hpp"
#include "engine/run_plan.hpp"
#include "engine/run_plan_follower.hpp"
#include "plimsoll/error.hpp"
#include "runtime/device_plan.hpp"
#include "runtime/device_listing.hpp"
#include "runtime/fixed_size_growth.hpp"
#include "runtime/gpu_sharing.hpp"
#include "runtime/gpu_visibility.hpp"
#include "runtime/physical_device.hpp"
#include "runtime/runtime_access.hpp"
#include "runtime/shared_backing.hpp"
#include "sharing/interposer_presence.hpp"

namespace plimsoll {
namespace {

std::optional<std::string> environment_value(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// The policy's run plan (Policy::run_plan), on a device just made or just given new limits. A plan packed for
// another granule or limit is ignored with a log line (the device runs as without one); a missing or malformed file
// throws InvalidArgument naming it and the fix (engine::read_run_plan).
// Read apart from installing (read_policy_run_plan, then install_run_plan), so that Runtime::configure reads and
// checks the file before it changes the device's limits: a bad file then changes nothing.
std::optional<engine::RunPlan> read_policy_run_plan(const Policy& policy) {
  if (!policy.run_plan) return std::nullopt;
  return engine::read_run_plan(*policy.run_plan);
}

void install_run_plan(Allocator& device, std::optional<engine::RunPlan> plan, bool log) {
  if (!plan) return;
  const std::string why = RunPlanLoader::install(device, std::move(*plan));
  if (!why.empty() && log) fmt::print(stderr, "plimsoll: {}: run plan ignored: {}\n", device.description().name, why);
}

void load_run_plan(Allocator& device, const Policy& policy, bool log) {
  install_run_plan(device, read_policy_run_plan(policy), log);
}

}  // namespace

struct Runtime::Impl {
  explicit Impl(Config initial) : config(std::move(initial)) {}
  ~Impl() {
    // The ledger's responders call into the allocators: they stop before any allocator is destroyed.
    for (auto& [name, sharing] : gpu_sharing) sharing->stop();
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // An OuterForkLock: a driver library may fork+exec while device_locked holds it (the driver's load, the scan).
  mutable engine::OuterForkLock mutex;
  // Every shared GPU's AllocatorGroup's lock (taken under `mutex` when a device joins its group). Registered here,
  // once, not by each group: a group is made under `mutex`, and registering an outer lock while holding one
  // deadlocks a concurrent fork (fork_handlers.hpp). Declared before gpu_sharing, which uses it.
  engine::OuterForkLock group_lock;
  Config config;
  std::optional<runtime::Hardware> hardware;
  // The driver the GPU scan used, kept to allocate from the GPUs it listed; absent when none loaded (or the
  // hardware was injected without one). Set together with `hardware`, so a listed GPU always has its driver.
  std::optional<cuda_driver::Api> driver;
  // PLIMSOLL_SHARE (config.gpu_shares), parsed at the first GPU device; empty: no GPU is shared.
  std::optional<std::vector<ShareSpec>> share_specs;
  // Each shared GPU's place in its ledger, by physical name; declared before the backings and devices that charge
  // it, so it is left only once they are gone.
  std::map<std::string, std::unique_ptr<runtime::GpuSharing>> gpu_sharing;
  // One physical device's backing shared by its logical devices, with what the backing can do.
  struct Shared {
    std::unique_ptr<runtime::SharedBacking> backing;
    bool growable = true;
    std::string fallback_reason;
  };
  // Declared before `devices` so that logical devices' allocators are destroyed before the backing they share.
  std::map<std::string, Shared> shared_backings;
  std::map<std::string, std::unique_ptr<Allocator>> devices;
  // Created devices whose backing cannot grow, with the reason: configure() keeps them preallocated.
  std::map<std::string, std::string> fixed_size_devices;
  std::set<std::string> fallback_noticed;

  const runtime::Hardware& scanned_hardware() {
    if (!hardware) {
      std::string why;
      driver = cuda_driver::load(why);
      GpuScan gpus = driver ? scan_gpus_with(*driver) : GpuScan{.gpus = {}, .unavailable_reason = why};
      hardware = runtime::Hardware{std::move(gpus), scan_host()};
    }
    return *hardware;
  }

  const cuda_driver::Api* driver_or_null() const { return driver ? &*driver : nullptr; }

  /// The GPU's place in its ledger when PLIMSOLL_SHARE names it (joined at its first device), else null. Null too
  /// when plimsoll's interposer governs this process: every driver allocation of the engine passes through it and
  /// is charged there already, to the process's one entry.
  runtime::GpuSharing* sharing_for(const runtime::PhysicalDevice& physical) {
    const std::optional<ShareSpec> spec = share_to_join(physical);
    if (!spec) return nullptr;
    const std::string key = physical.name.str();
    if (const auto found = gpu_sharing.find(key); found != gpu_sharing.end()) return found->second.get();
    auto joined = std::make_unique<runtime::GpuSharing>(key, physical.uuid, physical.memory.total_bytes, *spec,
                                                        ledger_directory(), group_lock);
    return gpu_sharing.emplace(key, std::move(joined)).first->second.get();
  }

  /// The share PLIMSOLL_SHARE gives `physical` when this runtime is the one to join its ledger: none for a host
  /// device, a GPU the variable does not name, or a process plimsoll's interposer governs (it holds the entry).
  std::optional<ShareSpec> share_to_join(const runtime::PhysicalDevice& physical) {
    if (physical.memory.kind != DeviceKind::cuda) return std::nullopt;
    if (!share_specs) share_specs = parsed_share_specs();
    const std::optional<ShareSpec> spec = runtime::share_for(*share_specs, physical.driver_ordinal);
    if (!spec || (driver && sharing::interposer_governs(*driver))) return std::nullopt;
    return spec;
  }

  /// `physical` as its devices would be planned now, without joining its ledger (listing must not take a share):
  /// a GPU already joined as the share showed it at the join; one not joined yet as runtime::planned_under_share
  /// says. Throws as creating would for a malformed PLIMSOLL_SHARE or a cap the GPU cannot hold.
  runtime::PhysicalDevice as_planned(const runtime::PhysicalDevice& physical) {
    if (gpu_sharing.count(physical.name.str()) != 0) return as_seen(physical);
    const std::optional<ShareSpec> spec = share_to_join(physical);
    return spec ? runtime::planned_under_share(physical, *spec) : physical;
  }

  std::vector<ShareSpec> parsed_share_specs() const {
    if (!config.gpu_shares) return {};
    try {
      return parse_share_specs(*config.gpu_shares);
    } catch (const InvalidArgument& error) {
      throw InvalidArgument(fmt::format("PLIMSOLL_SHARE=\"{}\": {}", *config.gpu_shares, error.what()));
    }
  }

  /// `physical` as this process may use it: under a GPU share, its cap and what the ledger would charge it.
  runtime::PhysicalDevice as_seen(runtime::PhysicalDevice physical) {
    if (const auto found = gpu_sharing.find(physical.name.str()); found != gpu_sharing.end())
      physical.memory = found->second->as_seen(physical.memory);
    return physical;
  }

  /// A fresh backing for `physical`, charged to its GPU share when it has one.
  runtime::DeviceBacking make_backing(const runtime::PhysicalDevice& physical, runtime::GpuSharing* sharing) {
    runtime::DeviceBacking made = runtime::make_backing(physical, driver_or_null());
    if (sharing != nullptr) made.backing = sharing->charged(std::move(made.backing));
    return made;
  }

  /// The backing for `physical`, shared by its logical devices when `logical`.
  runtime::DeviceBacking backing_for(const runtime::PhysicalDevice& physical, bool logical,
                                     runtime::GpuSharing* sharing) {
    if (!logical) return make_backing(physical, sharing);
    Shared& shared = shared_backings[physical.name.str()];
    if (!shared.backing) {
      runtime::DeviceBacking made = make_backing(physical, sharing);
      shared.backing = std::make_unique<runtime::SharedBacking>(std::move(made.backing));
      shared.growable = made.growable;
      shared.fallback_reason = std::move(made.fallback_reason);
    }
    return runtime::DeviceBacking{shared.backing->view(), shared.growable, shared.fallback_reason};
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
      missing = runtime::missing_backing_reason(name, driver.has_value());
    }
    if (!missing.empty()) return fall_back_or_throw(key, missing, gpus);

    const std::string physical_key = physical->name.str();
    const bool had_sharing = gpu_sharing.count(physical_key) != 0;
    const bool had_shared_backing = shared_backings.count(physical_key) != 0;
    try {
      runtime::GpuSharing* sharing = sharing_for(*physical);
      const runtime::PhysicalDevice seen = as_seen(*physical);
      runtime::DevicePlan plan = runtime::plan_device(config, seen, name);
      runtime::DeviceBacking backing = backing_for(seen, plan.logical, sharing);
      std::string note;
      if (!backing.growable) {
        plan.description.policy =
            runtime::fit_fixed_size(key, plan.description.policy, config, backing.fallback_reason);
        note = runtime::fixed_size_note(backing.fallback_reason);
      }
      auto allocator = std::make_unique<Allocator>(plan.description, std::move(backing.backing));
      if (config.log_device_creation) fmt::print(stderr, "{}{}\n", allocator->description().summary(), note);
      load_run_plan(*allocator, plan.description.policy, config.log_device_creation);
      Allocator& created = *allocator;
      devices.emplace(key, std::move(allocator));
      if (!backing.growable) fixed_size_devices.emplace(key, backing.fallback_reason);
      if (sharing != nullptr) sharing->add(created);
      return created;
    } catch (...) {
      // A GPU's first device that fails after joining its ledger (a split over the cap, a limit the share cannot
      // hold, a driver error) leaves it again: a member-less entry would keep the share promised, answering nothing.
      if (!had_sharing && !devices_on(physical_key)) {
        if (!had_shared_backing) shared_backings.erase(physical_key);
        gpu_sharing.erase(physical_key);
      }
      throw;
    }
  }

  /// Whether a device of the physical device `physical_key` (its logical devices included) was created.
  bool devices_on(const std::string& physical_key) const {
    for (const auto& [key, allocator] : devices)
      if (DeviceName::parse(key).physical().str() == physical_key) return true;
    return false;
  }

  Allocator& fall_back_or_throw(const std::string& requested, const std::string& reason,
                                const runtime::VisibleGpus& gpus) {
    if (!config.cpu_fallback) {
      std::string choices = "cpu";
      if (runtime::missing_backing_reason(DeviceKind::cuda, driver.has_value()).empty()) {
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

Runtime::Runtime(Config config) : impl_(std::make_unique<Impl>(std::move(config))) {
  // Taken first around every fork() (engine/fork_handlers.hpp, step 0): a thread making a device holds it, and the
  // child's first Runtime::device would wait for that thread forever.
  engine::register_outer_fork_lock(impl_->mutex);
  engine::register_outer_fork_lock(impl_->group_lock);  // after the mutex: the order add() nests them in
}

Runtime::~Runtime() {  // first: a fork from now on leaves them alone
  engine::unregister_outer_fork_lock(impl_->group_lock);
  engine::unregister_outer_fork_lock(impl_->mutex);
}

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
  return runtime::list_devices(impl_->config, impl_->visible_gpus(), impl_->scanned_hardware().host, created,
                               impl_->driver.has_value(),
                               [this](const runtime::PhysicalDevice& gpu) { return impl_->as_planned(gpu); });
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
    const DeviceDescription planned = runtime::plan_device(changed, impl_->as_seen(*physical), name).description;
    // The limit is worked out here, once (runtime/budget.hpp); the allocator takes it as it is.
    DeviceLimits limits{planned.policy, planned.limit_bytes};
    if (const auto fixed = impl_->fixed_size_devices.find(key); fixed != impl_->fixed_size_devices.end()) {
      limits.policy = runtime::fit_fixed_size(key, limits.policy, changed, fixed->second);
    }
    // Read (and parsed) before the limits change: a missing or malformed plan throws with the device untouched.
    std::optional<engine::RunPlan> run_plan = read_policy_run_plan(limits.policy);
    found->second->set_limits(limits);  // drops a run plan loaded for the old limits: loaded again from the policy
    install_run_plan(*found->second, std::move(run_plan), impl_->config.log_device_creation);
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
  impl_->share_specs.reset();  // read again from the new config's gpu_shares at the next GPU device
}

void Runtime::inject_hardware(GpuScan gpus, HostInfo host) {
  std::lock_guard lock(impl_->mutex);
  impl_->hardware = runtime::Hardware{std::move(gpus), std::move(host)};
  impl_->driver.reset();
}

namespace runtime {

void RuntimeAccess::inject_driver(Runtime& runtime, const cuda_driver::Api& driver, HostInfo host) {
  std::lock_guard lock(runtime.impl_->mutex);
  runtime.impl_->driver = driver;
  runtime.impl_->hardware = Hardware{scan_gpus_with(driver), std::move(host)};
}

}  // namespace runtime

}  // namespace plimsoll
