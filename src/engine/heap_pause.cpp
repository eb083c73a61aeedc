// Pause and resume: a heap gives every granule back while keeping its address space, and maps the same granules
// back later, so every pointer the program holds stays valid (docs/engine.md, "Pause and resume").
#include <algorithm>
#include <new>
#include <string>

#include <fmt/format.h>

#include "engine/heap.hpp"
#include "engine/paused_state.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll::engine {
namespace {

std::string device_free_text(const backings::Backing& backing) {
  try {
    return format_size(backing.memory().free_bytes);
  } catch (const std::exception&) {
    return "an unknown amount";
  }
}

}  // namespace

std::uint64_t Heap::paused_bytes() const { return paused_ != nullptr ? paused_->bytes() : 0; }

backings::DeviceCopy* Heap::check_pausable(bool keep_contents, std::string_view device) const {
  if (options_.preallocate)
    throw InvalidState(fmt::format(
        "cannot pause {}: its memory is one preallocated segment (policy preallocate), held whole for the "
        "process's life, so it cannot be unmapped while keeping its addresses; use the on_demand policy (growable "
        "segments) for a device you pause",
        device));
  if (paused_ != nullptr)
    throw InvalidState(fmt::format("cannot pause {}: it is paused already ({} unmapped); resume it first", device,
                                   format_size(paused_bytes())));
  backings::DeviceCopy* copy = nullptr;
  if (keep_contents) {
    copy = backing_.device_copy();
    if (copy == nullptr)
      throw InvalidState(fmt::format(
          "cannot keep the contents of {} while it is paused (pause it without keeping them): {} cannot copy its "
          "memory to the host (a simulated device has no contents; a CUDA driver without cuMemcpyDtoH cannot copy)",
          device, backing_.describe()));
  }
  return copy;
}

std::uint64_t Heap::pause(bool keep_contents, std::string_view device) {
  backings::DeviceCopy* copy = check_pausable(keep_contents, device);
  release_cached();  // the cache holds nothing worth keeping or mapping back
  auto state = std::make_unique<PausedState>();
  state->copy = copy;
  state->granule = granules_.granule();
  granules_.for_each_run(0, span_bytes_ / granules_.granule(), true, [&](std::uint64_t first, std::uint64_t count) {
    state->runs.push_back(PausedState::Run{.first = first, .count = count});
  });
  if (copy != nullptr) {
    // Copy everything before unmapping anything: a failure leaves the device running, nothing lost.
    const std::uint64_t total = state->bytes();
    for (PausedState::Run& run : state->runs) {
      const std::uint64_t bytes = run.count * state->granule;
      run.contents = copy->allocate_host(bytes);
      if (run.contents == nullptr)
        throw PauseError(fmt::format("cannot pause {} keeping its contents: the host has no room for a copy of {} ({} in "
                                "all); free host memory, or pause without keeping the contents. {} keeps running",
                                device, format_size(bytes), format_size(total), device));
      if (const std::string why = copy->to_host(run.contents, granules_.address_of(run.first), bytes); !why.empty())
        throw PauseError(fmt::format("cannot pause {} keeping its contents: copying them to the host failed ({}). {} keeps "
                                "running",
                                device, why, device));
    }
  }
  for (const PausedState::Run& run : state->runs) unmap_range(run.first, run.count);
  mapped_after_release_ = 0;
  paused_ = std::move(state);
  return paused_->bytes();
}

void Heap::resume(std::string_view device) {
  if (paused_ == nullptr)
    throw InvalidState(fmt::format("cannot resume {}: it is not paused (resume undoes pause; pause it first)", device));
  PausedState& state = *paused_;
  const auto unmap_all_mapped_back = [&](std::size_t runs) {
    for (std::size_t j = 0; j < runs; ++j) unmap_range(state.runs[j].first, state.runs[j].count);
  };
  for (std::size_t i = 0; i < state.runs.size(); ++i) {
    const PausedState::Run& run = state.runs[i];
    bool mapped = false;
    try {
      mapped = backing_.map(granules_.address_of(run.first), run.count * state.granule);
    } catch (const std::bad_alloc&) {  // the backing's own books, before it acted (backing.hpp): run i is not mapped
      unmap_all_mapped_back(i);        // all or nothing, as for a refusal: still paused, resumable
      throw;
    }
    if (!mapped) {
      unmap_all_mapped_back(i);  // all or nothing: still paused, as before the call
      throw PauseError(fmt::format(
          "cannot resume {}: mapping its memory back failed ({} to map back, {} at {:#x} refused; the device has {} "
          "free): other processes took it while {} was paused. {} stays paused with nothing lost{}; free memory "
          "there (or wait for it) and call resume again",
          device, format_size(state.bytes()), format_size(run.count * state.granule), granules_.address_of(run.first),
          device_free_text(backing_), device, device,
          state.copy != nullptr ? " (its contents are kept in host memory)" : ""));
    }
    granules_.set(run.first, run.count, true);
    ++counters_.maps;
  }
  if (state.copy != nullptr) {
    for (const PausedState::Run& run : state.runs) {
      if (const std::string why = state.copy->to_device(granules_.address_of(run.first), run.contents,
                                                        run.count * state.granule);
          !why.empty()) {
        unmap_all_mapped_back(state.runs.size());
        throw PauseError(fmt::format("cannot resume {}: copying its contents back failed ({}). {} stays paused, its "
                                "contents kept in host memory; call resume again",
                                device, why, device));
      }
    }
  }
  counters_.peak_mapped = std::max(counters_.peak_mapped, granules_.mapped_bytes());
  mapped_after_release_ = granules_.mapped_bytes();
  paused_.reset();
}

}  // namespace plimsoll::engine
