// plimsoll as libtorch's CPU allocator (include/plimsoll/torch.hpp, docs/torch.md). Compiled as C++17, libtorch's
// standard: libtorch 1.13's headers fail as C++20 under Clang 14, and plimsoll's C++20 headers are reached through
// bridge.hpp. Only names under c10:: are used, so the ::torch namespace never meets plimsoll::torch.
#include <atomic>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/alignment.h>
#include <c10/util/Exception.h>

#include "bridge.hpp"
#include "owner_table.hpp"
#include "scope_census.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/oom.hpp"
#include "plimsoll/torch.hpp"
#include "plimsoll/torch_error.hpp"

namespace plimsoll::torch {
namespace {

static_assert(bridge::kAlignment >= c10::gAlignment && bridge::kAlignment % c10::gAlignment == 0,
              "libtorch needs gAlignment (64 bytes) from its CPU allocator");

std::atomic<Allocator*> g_default_device{nullptr};  // install(); read by every thread without a DeviceScope
thread_local Allocator* t_device = nullptr;          // innermost DeviceScope of this thread
thread_local std::uint16_t t_tag = 0;                // innermost TagScope of this thread (0: untagged)

// Never destroyed, like the allocator: scopes may close during exit.
ScopeCensus<Allocator*>& scoped_devices() {
  static auto* const census = new ScopeCensus<Allocator*>();
  return *census;
}
ScopeCensus<std::uint16_t>& scoped_tags() {
  static auto* const census = new ScopeCensus<std::uint16_t>();
  return *census;
}

// This thread's tag, else the one every scoped thread agrees on (an at::parallel_for worker of a tagged caller).
std::uint16_t effective_tag() noexcept { return t_tag != 0 ? t_tag : scoped_tags().sole(); }

OwnerTable& owners() {
  static OwnerTable* const table = new OwnerTable();  // never destroyed: tensors may be freed during exit
  return *table;
}

// PyTorch's profiler (profile_memory=True) and c10's memory-usage reporting learn of CPU memory only from the
// allocator: DefaultCPUAllocator reports every allocation and free through c10::reportMemoryUsageToProfiler, so
// plimsoll does too, with its device's totals (in use, reserved) where libtorch's reporter has only its own count.
// memoryProfilingEnabled() is a thread-local read, so allocations pay nothing more while no profiler listens.
void report_to_profiler(void* ptr, std::int64_t bytes, const Allocator& device) noexcept {
  try {
    if (!c10::memoryProfilingEnabled()) return;
    const bridge::Totals totals = bridge::totals(device);
    c10::reportMemoryUsageToProfiler(ptr, bytes, static_cast<std::int64_t>(totals.in_use_bytes),
                                     static_cast<std::int64_t>(totals.reserved_bytes),
                                     c10::Device(c10::DeviceType::CPU));
  } catch (...) {
    // A profiler that fails to record must not fail the allocation or the free it watches.
  }
}

// The deleter of every DataPtr the allocator returns, and its raw_deleter(). Never throws: libtorch calls it from
// destructors. A pointer the table does not know is reported and left alone rather than freed into a wrong device.
void free_cpu(void* ptr) {
  if (ptr == nullptr) return;
  const OwnerTable::Owner owner = owners().take(ptr);
  if (owner.device == nullptr) {
    std::fprintf(stderr, "plimsoll: libtorch freed %p, which plimsoll's CPU allocator did not allocate; ignored\n",
                 ptr);
    return;
  }
  try {
    bridge::deallocate(*owner.device, ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plimsoll: freeing a libtorch tensor failed: %s\n", e.what());
    return;
  }
  report_to_profiler(ptr, -static_cast<std::int64_t>(owner.bytes), *owner.device);
}

class CpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) const override {
    plimsoll::Allocator* device = current_device();
    TORCH_CHECK(device != nullptr, "plimsoll: no device for a CPU allocation; call plimsoll::torch::install first");
    void* ptr = nullptr;
    try {
      ptr = bridge::allocate(*device, bytes, effective_tag());
    } catch (const plimsoll::OutOfMemory& oom) {
      // What a failed CPU allocation raises in libtorch (a c10::Error, RuntimeError in Python), never c10's
      // OutOfMemoryError, which Python raises as torch.cuda.OutOfMemoryError. The message is plimsoll's report.
      throw HostOutOfMemoryError(c10::SourceLocation{__func__, __FILE__, static_cast<std::uint32_t>(__LINE__)},
                                 oom.what());
    } catch (const plimsoll::Error& e) {
      C10_THROW_ERROR(Error, e.what());
    }
    try {
      owners().insert(ptr, device, bytes);
    } catch (...) {
      bridge::deallocate(*device, ptr);
      throw;
    }
    report_to_profiler(ptr, static_cast<std::int64_t>(bytes), *device);
    return {ptr, ptr, &free_cpu, c10::Device(c10::DeviceType::CPU)};
  }

  // raw_allocate needs the context to be the data pointer (it is); raw_deallocate needs this deleter.
  c10::DeleterFnPtr raw_deleter() const override { return &free_cpu; }
};

struct Installation {
  std::mutex mutex;
  bool installed = false;
  c10::Allocator* previous = nullptr;
  std::uint8_t priority = 0;
};

Installation& installation() {
  static Installation* const state = new Installation();
  return *state;
}

CpuAllocator& cpu_allocator() {
  static CpuAllocator* const allocator = new CpuAllocator();  // c10 wants static lifetime; never destroyed
  return *allocator;
}

}  // namespace

void install(Allocator& default_device, std::uint8_t priority) {
  Installation& state = installation();
  std::lock_guard<std::mutex> lock(state.mutex);
  g_default_device.store(&bridge::require_host(default_device), std::memory_order_release);
  if (state.installed && c10::GetAllocator(c10::DeviceType::CPU) == &cpu_allocator()) return;
  if (state.installed) {
    // Another library replaced plimsoll since (installed_allocator_overridden): take the place back, if this
    // priority allows; uninstall() still restores what was there before plimsoll's first install.
    c10::SetAllocator(c10::DeviceType::CPU, &cpu_allocator(), priority);
    if (c10::GetAllocator(c10::DeviceType::CPU) != &cpu_allocator()) {
      throw InvalidState("plimsoll::torch::install: another CPU allocator replaced plimsoll's with a priority above " +
                         std::to_string(priority) + "; pass a higher priority (up to 255)");
    }
    state.priority = priority;
    return;
  }
  c10::Allocator* previous = c10::GetAllocator(c10::DeviceType::CPU);
  c10::SetAllocator(c10::DeviceType::CPU, &cpu_allocator(), priority);
  if (c10::GetAllocator(c10::DeviceType::CPU) != &cpu_allocator()) {
    throw InvalidState("plimsoll::torch::install: libtorch kept its CPU allocator, which was set with a priority "
                       "above " + std::to_string(priority) + "; pass a higher priority");
  }
  state.previous = previous;
  state.priority = priority;
  state.installed = true;
}

void install(std::string_view default_device, std::uint8_t priority) {
  install(bridge::global_device(default_device), priority);
}

void uninstall() {
  Installation& state = installation();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.installed) return;
  c10::SetAllocator(c10::DeviceType::CPU, state.previous, state.priority);
  state.installed = false;
}

bool installed() noexcept {
  Installation& state = installation();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.installed;
}

bool installed_allocator_overridden() noexcept {
  Installation& state = installation();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.installed && c10::GetAllocator(c10::DeviceType::CPU) != &cpu_allocator();
}

std::string allocator_report_line() {
  if (!installed_allocator_overridden()) return {};
  return "plimsoll: another CPU allocator replaced plimsoll's in libtorch (set later with a higher priority): CPU "
         "tensors made since then are neither counted nor limited by plimsoll; call "
         "plimsoll::torch::install(device, 255) after the library that installs it";
}

Allocator* current_device() noexcept {
  if (t_device != nullptr) return t_device;
  Allocator* followed = scoped_devices().sole();  // a thread with no scope follows the process's only one
  return followed != nullptr ? followed : g_default_device.load(std::memory_order_acquire);
}

std::string_view current_tag() {
  const std::uint16_t tag = effective_tag();
  return tag == 0 ? std::string_view() : bridge::tag_name(tag);
}

DeviceScope::DeviceScope(Allocator& device) : previous_(t_device) {
  t_device = &bridge::require_host(device);
  scoped_devices().replace(previous_, t_device);
}

DeviceScope::DeviceScope(std::string_view device) : previous_(t_device) {
  t_device = &bridge::require_host(bridge::global_device(device));
  scoped_devices().replace(previous_, t_device);
}

DeviceScope::~DeviceScope() {
  scoped_devices().replace(t_device, previous_);
  t_device = previous_;
}

TagScope::TagScope(std::string_view tag) : previous_(t_tag) {
  t_tag = bridge::intern_tag(tag);
  scoped_tags().replace(previous_, t_tag);
}

TagScope::~TagScope() {
  scoped_tags().replace(t_tag, previous_);
  t_tag = previous_;
}

}  // namespace plimsoll::torch
