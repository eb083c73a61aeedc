#pragma once
// plimsoll as libtorch's CPU allocator (library plimsoll_torch, built when CMake finds libtorch; docs/torch.md).
//
// This header includes no libtorch header and no C++20-only plimsoll header: it compiles as C++17 and C++20, so
// code built with libtorch's own standard (C++17) can use it. Devices are named as for Runtime ("cpu", "cpu/1")
// or passed as plimsoll::Allocator& (from a Runtime, in C++20 code).
//
//   plimsoll::torch::install("cpu");                       // before the first tensor
//   {
//     plimsoll::torch::DeviceScope on_b("cpu/1");          // this thread's tensors now come from cpu/1
//     plimsoll::torch::TagScope weights(plimsoll::torch::tags::weights);
//     auto w = torch::randn({1024, 1024});                 // 4 MiB on cpu/1, tag "weights"
//   }
#include <cstdint>
#include <string>
#include <string_view>

namespace plimsoll {

class Allocator;

namespace torch {

/// Installs plimsoll as libtorch's CPU allocator through c10::SetAllocator(CPU, ..., priority): every CPU
/// tensor allocated afterwards comes from a plimsoll device, and is reported to c10's memory profiling (PyTorch's
/// profiler with profile_memory) as DefaultCPUAllocator reports its own. A tensor that does not fit throws
/// HostOutOfMemoryError (plimsoll/torch_error.hpp; Python: RuntimeError) with plimsoll's report. Call it before the first tensor (libtorch caches the
/// allocator in places; tensors made before keep libtorch's allocator, which is harmless). `default_device` serves
/// allocations made outside any DeviceScope, on every thread (libtorch's worker threads included). Calling it again
/// replaces the default device. Every device that served a tensor must outlive that tensor. Only host devices ("cpu",
/// "cpu/K") can hold CPU tensors: a simulated or CUDA device throws InvalidArgument, here and in DeviceScope.
void install(Allocator& default_device, std::uint8_t priority = 1);
/// The same with a device of Runtime::global() (created on first use; "cpu", "cpu/1", "sim:1GiB" ...).
void install(std::string_view default_device = "cpu", std::uint8_t priority = 1);
/// Puts back the allocator that was there before install(). Tensors plimsoll allocated stay valid: their deleter
/// still returns them to the device they came from.
void uninstall();
bool installed() noexcept;

/// True when plimsoll is installed but libtorch's CPU allocator is no longer plimsoll's: another library called
/// c10::SetAllocator / SetCPUAllocator after install() with a priority at least as high. From then on new CPU tensors
/// bypass plimsoll (not counted, not limited). Compares c10::GetAllocator(CPU) with plimsoll's on each call, so a
/// report that calls it says what holds now. install() again with a priority at least the other's takes the place
/// back.
bool installed_allocator_overridden() noexcept;
/// One line for reports when installed_allocator_overridden(): what happened, what it means, the fix; "" otherwise.
std::string allocator_report_line();

/// The device that serves this thread's next CPU allocation: the innermost DeviceScope of this thread; else, when
/// every thread that has a DeviceScope names the same device, that device (so at::parallel_for's workers follow
/// their caller); else the default device of install(); nullptr when none exists.
Allocator* current_device() noexcept;
/// The tag of this thread's next CPU allocation, chosen the same way from TagScopes; "" (untagged) when none
/// applies.
std::string_view current_tag();

/// Routes this thread's CPU allocations to `device` while it lives (scopes nest; restore on destruction). A tensor
/// is always freed into the device that allocated it, whichever thread or scope frees it.
/// Threads with no scope of their own (at::parallel_for's OpenMP workers, which libtorch starts without plimsoll's
/// thread-locals) follow it while it is the process's only scoped device; when threads are scoped to different
/// devices, they take the default (docs/torch.md, "Threads").
class DeviceScope {
 public:
  explicit DeviceScope(Allocator& device);
  explicit DeviceScope(std::string_view device);  // a device of Runtime::global()
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  Allocator* previous_;
};

/// Tags this thread's CPU allocations with `tag` while it lives (the per-tag bytes in Stats::tags and in OOM
/// reports). Nesting, and followed by threads without a scope, like DeviceScope.
class TagScope {
 public:
  explicit TagScope(std::string_view tag);
  ~TagScope();
  TagScope(const TagScope&) = delete;
  TagScope& operator=(const TagScope&) = delete;

 private:
  std::uint16_t previous_;
};

/// The tag names the training loop uses for the usual kinds of memory.
namespace tags {
inline constexpr std::string_view weights = "weights";
inline constexpr std::string_view gradients = "gradients";
inline constexpr std::string_view optimizer_state = "optimizer_state";
inline constexpr std::string_view activations = "activations";
inline constexpr std::string_view batches = "batches";
}  // namespace tags

}  // namespace torch
}  // namespace plimsoll
