#include "plan/plan_replay.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "plan/allocator_models.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/oom.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll::plan {
namespace {

constexpr std::uint64_t kGranule = std::uint64_t{2} << 20;
constexpr std::size_t kPeakFillEntries = 5;

// One allocator as the replay sees it: slots in, whether the allocation succeeded out.
class Target {
 public:
  virtual ~Target() = default;
  /// False when the allocator is out of memory; `report` then holds why.
  virtual bool allocate(std::uint32_t slot, std::uint64_t bytes, std::string_view tag, std::string& report) = 0;
  virtual void free(std::uint32_t slot) = 0;
  virtual std::uint64_t in_use() const = 0;
  virtual std::uint64_t peak_reserved() const = 0;
  /// Where the job would call plimsoll::step(); only plimsoll's engine plans by steps.
  virtual void step() {}
};

class EngineTarget final : public Target {
 public:
  EngineTarget(std::uint64_t device_bytes, std::uint32_t slots) : blocks_(slots, nullptr) {
    Config config;
    config.log_device_creation = false;
    runtime_ = std::make_unique<Runtime>(config);
    device_ = &runtime_->device(fmt::format("sim:{}", device_bytes));
  }
  ~EngineTarget() override {
    for (void* block : blocks_) {
      if (block == nullptr) continue;
      try {
        device_->deallocate(block);
      } catch (const Error&) {
        // Cleanup after the replay: the device goes away with the runtime just after, nothing is lost.
      }
    }
  }
  bool allocate(std::uint32_t slot, std::uint64_t bytes, std::string_view tag, std::string& report) override {
    try {
      blocks_[slot] = device_->allocate(static_cast<std::size_t>(bytes), tag.empty() ? kUntagged : intern_tag(tag));
      return true;
    } catch (const OutOfMemory& oom) {
      report = oom.what();
      return false;
    }
  }
  void free(std::uint32_t slot) override {
    device_->deallocate(std::exchange(blocks_[slot], nullptr));
  }
  std::uint64_t in_use() const override { return device_->usage().in_use_bytes; }
  std::uint64_t peak_reserved() const override { return device_->stats().peak_reserved_bytes; }
  void step() override { device_->step(); }

 private:
  std::unique_ptr<Runtime> runtime_;
  Allocator* device_ = nullptr;
  std::vector<void*> blocks_;
};

template <class Model>
class ModelTarget final : public Target {
 public:
  ModelTarget(Model model, std::string name, std::optional<std::uint64_t> limit, std::uint32_t slots)
      : model_(std::move(model)), name_(std::move(name)), limit_(limit), addresses_(slots, 0) {}
  bool allocate(std::uint32_t slot, std::uint64_t bytes, std::string_view tag, std::string& report) override {
    const std::optional<std::uint64_t> address = model_.allocate(bytes);
    if (address) {
      addresses_[slot] = *address;
      return true;
    }
    const ModelStats& stats = model_.stats();
    report = fmt::format(
        "out of memory in the model of {}: a request of {}{} failed with {} in use in {} reserved of a {} device; "
        "the allocator's caching and rounding take the rest",
        name_, format_size(bytes), tag.empty() ? std::string() : fmt::format(" (tag {})", tag),
        format_size(stats.in_use_bytes), format_size(stats.reserved_bytes), format_size(limit_.value_or(0)));
    return false;
  }
  void free(std::uint32_t slot) override { model_.deallocate(std::exchange(addresses_[slot], 0)); }
  std::uint64_t in_use() const override { return model_.stats().in_use_bytes; }
  std::uint64_t peak_reserved() const override { return model_.stats().peak_reserved_bytes; }

 private:
  Model model_;
  std::string name_;
  std::optional<std::uint64_t> limit_;
  std::vector<std::uint64_t> addresses_;
};

std::unique_ptr<Target> make_target(PlanAllocator allocator, const Trace& step,
                                    std::optional<std::uint64_t> device_bytes) {
  switch (allocator) {
    case PlanAllocator::plimsoll: {
      // No limit: a simulated device far larger than the step needs (nothing is touched, only counted).
      const std::uint64_t unlimited = std::max<std::uint64_t>(std::uint64_t{64} << 30, 4 * step.peak_live_bytes);
      const std::uint64_t bytes = device_bytes.value_or(unlimited);
      // Whole granules, rounded down: a device of 23 MiB holds 11 granules, not 12 (at least one, for tiny devices).
      return std::make_unique<EngineTarget>(std::max(kGranule, bytes / kGranule * kGranule), step.slots);
    }
    case PlanAllocator::pytorch:
      return std::make_unique<ModelTarget<CudaCachingModel>>(CudaCachingModel({device_bytes}),
                                                              "PyTorch's CUDA caching allocator", device_bytes,
                                                              step.slots);
    case PlanAllocator::tensorflow:
      return std::make_unique<ModelTarget<BfcModel>>(BfcModel({device_bytes, true}), "TensorFlow's BFC allocator",
                                                     device_bytes, step.slots);
  }
  return nullptr;
}

// What is live after event `until` (inclusive), by tag; by call site in a trace without tags; by the step that made
// it in a trace with neither (the text format).
std::vector<PeakShare> live_by_name(const Trace& step, std::size_t until) {
  enum class By { tag, site, made_in_step };
  const By by = step.tags.size() > 1 ? By::tag : step.sites.size() > 1 ? By::site : By::made_in_step;
  std::vector<std::string> names;
  if (by == By::tag) names = step.tags;
  if (by == By::site) names = step.sites;
  if (by == By::made_in_step) {
    names.push_back("made before the first step");
    for (const TraceStep& made_in : step.steps) names.push_back(fmt::format("made in step {}", made_in.number));
  }
  std::vector<std::uint64_t> bytes(names.size(), 0);
  std::vector<std::uint64_t> slot_bytes(step.slots, 0);
  std::vector<std::size_t> slot_name(step.slots, 0);
  std::size_t current_step = 0;  // By::made_in_step: index into names of the segment being read
  for (std::size_t index = 0; index <= until && index < step.events.size(); ++index) {
    const TraceEvent& event = step.events[index];
    if (by == By::made_in_step && current_step < step.steps.size() && index >= step.steps[current_step].begin) ++current_step;
    if (event.kind == TraceEvent::Kind::allocate) {
      const std::size_t name = by == By::tag ? event.tag : by == By::site ? event.site : current_step;
      slot_bytes[event.slot] = event.bytes;
      slot_name[event.slot] = name;
      bytes[name] += event.bytes;
    } else if (event.kind == TraceEvent::Kind::free) {
      bytes[slot_name[event.slot]] -= slot_bytes[event.slot];
    }
  }
  std::vector<PeakShare> shares;
  for (std::size_t name = 0; name < bytes.size(); ++name) {
    if (bytes[name] == 0) continue;
    const std::string& text = names[name];
    shares.push_back({text.empty() ? (by == By::tag ? "untagged" : "unknown call site") : text, bytes[name]});
  }
  std::sort(shares.begin(), shares.end(), [](const PeakShare& a, const PeakShare& b) { return a.bytes > b.bytes; });
  if (shares.size() > kPeakFillEntries) {
    PeakShare rest{"other", 0};
    for (std::size_t i = kPeakFillEntries; i < shares.size(); ++i) rest.bytes += shares[i].bytes;
    shares.resize(kPeakFillEntries);
    shares.push_back(rest);
  }
  return shares;
}

}  // namespace

AllocatorPrediction replay_under(const Trace& step, PlanAllocator allocator,
                                 std::optional<std::uint64_t> device_bytes) {
  AllocatorPrediction prediction{.allocator = allocator, .peak_live_bytes = step.peak_live_bytes, .fits = true};
  std::unique_ptr<Target> target = make_target(allocator, step, device_bytes);
  std::uint64_t peak_in_use = 0;
  std::size_t peak_event = 0;
  const std::vector<bool> boundary = step_boundaries(step);
  for (std::size_t index = 0; index < step.events.size(); ++index) {
    if (boundary[index]) target->step();
    const TraceEvent& event = step.events[index];
    if (event.kind == TraceEvent::Kind::allocate) {
      const std::string_view tag = event.tag < step.tags.size() ? std::string_view(step.tags[event.tag]) : "";
      if (!target->allocate(event.slot, event.bytes, tag, prediction.oom_report)) {
        prediction.fits = false;
        peak_event = index;
        break;
      }
      if (const std::uint64_t in_use = target->in_use(); in_use > peak_in_use) {
        peak_in_use = in_use;
        peak_event = index;
      }
    } else if (event.kind == TraceEvent::Kind::free) {
      target->free(event.slot);
    }
  }
  prediction.peak_reserved_bytes = target->peak_reserved();
  prediction.peak_fill = live_by_name(step, peak_event);
  return prediction;
}

}  // namespace plimsoll::plan
