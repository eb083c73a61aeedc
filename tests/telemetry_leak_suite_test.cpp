// The leak watch's acceptance suite (docs/leaks.md, "The suite"), generated here from the shared traces with fixed
// seeds: real training steps repeated into longer runs, with never-freed allocations injected as leaks (0.1% to
// 5% of peak live bytes, every step or every 2nd or 3rd step) or as a cache that grows for 5 steps and stops, and
// with every allocation of a step scaled by a per-step factor in [0.9, 1.1] (batch sizes that vary). Each case's
// expected values come from what was injected. Then the real pair of traces, as recorded.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "plimsoll/trace.hpp"
#include "telemetry/leaks/leak_watch.hpp"

namespace plimsoll::telemetry {
namespace {

// The requirement: a leak is found within this many steps after its first step...
constexpr std::size_t kFoundWithinSteps = 6;
// ...with bytes_per_step within this share of what was injected.
constexpr double kRateTolerance = 0.05;
// Generated runs are this long: enough to see every case settle, and within the watch's window.
constexpr std::size_t kRunSteps = 16;

std::string trace_path(const std::string& file) { return std::string(PLIMSOLL_TRACES_DIR) + "/" + file; }

// One operation of the repeated step, with allocations named by their position in their step.
struct StepOp {
  enum class Kind : std::uint8_t { allocate, free_same_step, free_previous_step };
  Kind kind = Kind::allocate;
  std::size_t index = 0;     // free: position (0-based) of the freed allocation in its step
  TraceEvent event;          // allocate: the source event (bytes, tag, site)
};

// A shared trace, and its last step as a template that repeats: in every shared trace, the steps after the first
// have one structure, and each frees only its own allocations and those its predecessor kept.
struct Source {
  std::string file;
  Trace trace;
  std::vector<StepOp> repeated_step;
  std::vector<std::uint32_t> step1_slots;  // allocations of the real second step, in order
};

std::vector<std::uint32_t> allocation_slots(const Trace& trace, const TraceStep& step) {
  std::vector<std::uint32_t> slots;
  for (std::size_t index = step.begin; index < step.end; ++index) {
    if (trace.events[index].kind == TraceEvent::Kind::allocate) slots.push_back(trace.events[index].slot);
  }
  return slots;
}

Source load_source(const std::string& file) {
  Source source{.file = file, .trace = read_trace(trace_path(file)), .repeated_step = {}, .step1_slots = {}};
  const std::vector<TraceStep>& steps = source.trace.steps;
  if (steps.size() < 3) throw std::runtime_error(file + " has fewer than 3 steps");
  const TraceStep& last = steps.back();
  const TraceStep& before_last = steps[steps.size() - 2];
  source.step1_slots = allocation_slots(source.trace, steps[1]);
  std::unordered_map<std::uint32_t, std::size_t> previous_positions;
  const std::vector<std::uint32_t> previous = allocation_slots(source.trace, before_last);
  for (std::size_t i = 0; i < previous.size(); ++i) previous_positions[previous[i]] = i;
  if (previous.size() != source.step1_slots.size()) throw std::runtime_error(file + ": steps 1 and N-1 differ");

  std::unordered_map<std::uint32_t, std::size_t> own_positions;
  for (std::size_t index = last.begin; index < last.end; ++index) {
    const TraceEvent& event = source.trace.events[index];
    if (event.kind == TraceEvent::Kind::allocate) {
      own_positions[event.slot] = own_positions.size();
      source.repeated_step.push_back({.kind = StepOp::Kind::allocate, .index = 0, .event = event});
    } else if (event.kind == TraceEvent::Kind::free) {
      if (const auto own = own_positions.find(event.slot); own != own_positions.end()) {
        source.repeated_step.push_back({.kind = StepOp::Kind::free_same_step, .index = own->second, .event = {}});
      } else if (const auto kept = previous_positions.find(event.slot); kept != previous_positions.end()) {
        source.repeated_step.push_back(
            {.kind = StepOp::Kind::free_previous_step, .index = kept->second, .event = {}});
      } else {
        throw std::runtime_error(file + ": the last step frees an allocation older than the step before it");
      }
    }
  }
  return source;
}

const std::vector<Source>& sources() {
  // Every shared trace but the one that leaks by design (its repeated step would leak too).
  static const std::vector<Source> loaded = [] {
    std::vector<Source> all;
    for (const char* file : {"leak-clean-resnet18.trace", "gpt-6-512-b8.trace", "resnet18-b128-sgd.trace",
                             "vgg16-b16.trace", "mobilenet_v2-b64.trace", "resnet50-b32.trace"}) {
      all.push_back(load_source(file));
    }
    return all;
  }();
  return loaded;
}

// What a generated run looks like: per-step size factors, and never-freed allocations per step (leak or cache).
struct RunSpec {
  std::size_t steps = kRunSteps;
  std::vector<double> jitter;                          // one factor per step; empty = 1 everywhere
  std::map<std::size_t, std::uint64_t> kept;          // step -> bytes of one allocation that is never freed
  double kept_at = 0.5;                                // where in its step the kept allocation is made (share)
};

std::uint64_t scaled(std::uint64_t bytes, double factor) {
  return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(static_cast<double>(bytes) * factor)));
}

// The source's events before its first step, its real steps 0 and 1, then its last step repeated.
Trace build_run(const Source& source, const RunSpec& spec) {
  const Trace& real = source.trace;
  Trace run;
  run.origin = fmt::format("{} repeated to {} steps", source.file, spec.steps);
  run.tags = real.tags;
  run.sites = real.sites;
  run.markers = real.markers;
  std::uint32_t next_slot = real.slots;
  const auto add_marker = [&run](std::string text) {
    run.markers.push_back(std::move(text));
    const auto index = static_cast<std::uint32_t>(run.markers.size() - 1);
    run.events.push_back({.kind = TraceEvent::Kind::marker, .slot = index});
  };
  run.events.assign(real.events.begin(),
                    real.events.begin() + static_cast<std::ptrdiff_t>(real.steps.front().begin - 1));

  std::vector<std::uint32_t> previous_slots;
  for (std::size_t step = 0; step < spec.steps; ++step) {
    const double factor = spec.jitter.empty() ? 1.0 : spec.jitter[step];
    add_marker(fmt::format("step {} begin", step));
    const std::size_t begin = run.events.size();
    // The step's body, as events whose allocations are already scaled.
    std::vector<TraceEvent> body;
    std::vector<std::uint32_t> slots;
    if (step <= 1) {
      const TraceStep& real_step = real.steps[step];
      body.assign(real.events.begin() + static_cast<std::ptrdiff_t>(real_step.begin),
                  real.events.begin() + static_cast<std::ptrdiff_t>(real_step.end));
    } else {
      if (step == 2) previous_slots = source.step1_slots;
      for (const StepOp& op : source.repeated_step) {
        switch (op.kind) {
          case StepOp::Kind::allocate: {
            TraceEvent event = op.event;
            event.slot = next_slot++;
            slots.push_back(event.slot);
            body.push_back(event);
            break;
          }
          case StepOp::Kind::free_same_step:
            body.push_back({.kind = TraceEvent::Kind::free, .slot = slots.at(op.index)});
            break;
          case StepOp::Kind::free_previous_step:
            body.push_back({.kind = TraceEvent::Kind::free, .slot = previous_slots.at(op.index)});
            break;
        }
      }
      previous_slots = slots;
    }
    const auto kept = spec.kept.find(step);
    const auto kept_index = static_cast<std::size_t>(spec.kept_at * static_cast<double>(body.size()));
    for (std::size_t index = 0; index <= body.size(); ++index) {
      if (kept != spec.kept.end() && index == kept_index) {
        // Already sized as injected (the jitter is part of what the case injected).
        run.events.push_back({.kind = TraceEvent::Kind::allocate, .slot = next_slot++, .bytes = kept->second});
      }
      if (index == body.size()) break;
      TraceEvent event = body[index];
      if (event.kind == TraceEvent::Kind::allocate) event.bytes = scaled(event.bytes, factor);
      run.events.push_back(event);
    }
    run.steps.push_back({.number = static_cast<int>(step), .begin = begin, .end = run.events.size()});
    add_marker(fmt::format("step {} end", step));
  }
  run.slots = next_slot;
  return run;
}

// The trace as if the recording had stopped after `steps` steps (at least one).
Trace cut_after(const Trace& trace, std::size_t steps) {
  Trace cut;
  cut.origin = trace.origin;
  cut.markers = trace.markers;
  cut.tags = trace.tags;
  cut.sites = trace.sites;
  cut.slots = trace.slots;
  cut.steps.assign(trace.steps.begin(), trace.steps.begin() + static_cast<std::ptrdiff_t>(steps));
  cut.events.assign(trace.events.begin(), trace.events.begin() + static_cast<std::ptrdiff_t>(cut.steps.back().end + 1));
  return cut;
}

std::vector<double> jitter_factors(std::mt19937_64& random, std::size_t steps) {
  std::uniform_real_distribution<double> factor(0.9, 1.1);
  std::vector<double> factors(steps);
  for (double& value : factors) value = factor(random);
  return factors;
}

double log_uniform(std::mt19937_64& random, double low, double high) {
  return std::exp(std::uniform_real_distribution<double>(std::log(low), std::log(high))(random));
}

// A seeded leak case: which source, how big, how often, from which step, with or without jitter.
struct LeakCase {
  const Source* source = nullptr;
  double share_of_peak = 0;
  std::size_t every = 1;
  std::size_t first = 1;
  RunSpec spec;         // with the leak
  RunSpec clean_spec;   // the same run without it

  std::string name() const {
    return fmt::format("{}: {:.3f}% of peak every {} steps from step {}{}", source->file, 100 * share_of_peak, every,
                       first, spec.jitter.empty() ? "" : ", jittered");
  }

  // The rate that was injected, over whole leak periods between the first and the last leak a run cut after
  // `steps` steps has confirmed (a leak is confirmed once it outlives the step after its own).
  std::optional<double> injected_rate(std::size_t steps) const {
    std::vector<std::pair<std::size_t, std::uint64_t>> confirmed;
    for (const auto& [step, bytes] : spec.kept) {
      if (step + 1 < steps) confirmed.emplace_back(step, bytes);
    }
    if (confirmed.size() < 2) return std::nullopt;
    double bytes = 0;
    for (std::size_t i = 1; i < confirmed.size(); ++i) bytes += static_cast<double>(confirmed[i].second);
    return bytes / static_cast<double>(confirmed.back().first - confirmed.front().first);
  }
};

LeakCase make_leak_case(std::uint64_t seed) {
  std::mt19937_64 random(seed);
  // Seeds 1..36 give every source with every rhythm, jittered and not.
  const std::size_t index = static_cast<std::size_t>(seed - 1);
  LeakCase leak;
  leak.source = &sources()[index % sources().size()];
  leak.share_of_peak = log_uniform(random, 0.001, 0.05);
  leak.every = 1 + index / sources().size() % 3;
  leak.first = 1 + std::uniform_int_distribution<std::size_t>(0, 2)(random);
  const bool jittered = index / (3 * sources().size()) % 2 == 1;
  leak.clean_spec.kept_at = std::uniform_real_distribution<double>(0, 1)(random);
  if (jittered) leak.clean_spec.jitter = jitter_factors(random, kRunSteps);
  leak.spec = leak.clean_spec;
  const double nominal = leak.share_of_peak * static_cast<double>(leak.source->trace.peak_live_bytes);
  for (std::size_t step = leak.first; step < kRunSteps; step += leak.every) {
    leak.spec.kept[step] = scaled(static_cast<std::uint64_t>(nominal), jittered ? leak.spec.jitter[step] : 1.0);
  }
  return leak;
}

constexpr std::uint64_t kLeakSeeds = 36;

void expect_rate_near(const LeakReport& report, double expected, const std::string& what) {
  EXPECT_NEAR(report.bytes_per_step, expected, kRateTolerance * expected)
      << what << ": bytes_per_step " << report.bytes_per_step << ", injected " << expected;
}

TEST(LeakSuite, EveryLeakIsFoundWithinSixStepsOfItsFirstStepAtTheInjectedRate) {
  for (std::uint64_t seed = 1; seed <= kLeakSeeds; ++seed) {
    const LeakCase leak = make_leak_case(seed);
    SCOPED_TRACE(fmt::format("seed {}: {}", seed, leak.name()));
    const Trace run = build_run(*leak.source, leak.spec);

    const std::size_t found_by = leak.first + kFoundWithinSteps + 1;  // steps 0 .. first + 6
    const LeakReport early = find_leaks(cut_after(run, found_by));
    ASSERT_TRUE(early.leak()) << to_string(early.verdict);
    expect_rate_near(early, leak.injected_rate(found_by).value(), "cut after step first + 6");

    const LeakReport full = find_leaks(run);
    ASSERT_TRUE(full.leak()) << to_string(full.verdict);
    expect_rate_near(full, leak.injected_rate(kRunSteps).value(), "whole run");
    EXPECT_NEAR(full.allocations_per_step, 1.0 / static_cast<double>(leak.every), 1e-9);
    EXPECT_NEAR(full.growth_every_steps, static_cast<double>(leak.every), 1e-9);
    if (leak.spec.jitter.empty()) {
      // Without jitter, every leak has the nominal size: the rate is that size over the period.
      const double nominal = leak.share_of_peak * static_cast<double>(leak.source->trace.peak_live_bytes);
      expect_rate_near(full, std::floor(nominal) / static_cast<double>(leak.every), "nominal");
    }
    // The leak is one group, at its position in the step, made in the leaking steps.
    ASSERT_FALSE(full.groups.empty());
    const auto confirmed = static_cast<std::uint64_t>(std::count_if(
        leak.spec.kept.begin(), leak.spec.kept.end(), [](const auto& kept) { return kept.first + 1 < kRunSteps; }));
    EXPECT_EQ(full.groups.front().allocations, confirmed);
    EXPECT_EQ(full.groups.front().first_step, static_cast<int>(leak.first));
  }
}

TEST(LeakSuite, RunsOfThreeStepsOrFewerAreNeverALeak) {
  for (std::uint64_t seed = 1; seed <= kLeakSeeds; ++seed) {
    const LeakCase leak = make_leak_case(seed);
    SCOPED_TRACE(fmt::format("seed {}: {}", seed, leak.name()));
    const Trace run = build_run(*leak.source, leak.spec);
    for (std::size_t steps = 1; steps <= LeakWatch::kMinSteps; ++steps) {
      const LeakReport report = find_leaks(cut_after(run, steps));
      EXPECT_EQ(report.verdict, LeakVerdict::too_few_steps) << steps << " steps";
      EXPECT_EQ(report.steps, steps);
    }
  }
}

TEST(LeakSuite, CleanTwinsAreNeverFlaggedWhereverTheRunStops) {
  for (std::uint64_t seed = 1; seed <= kLeakSeeds; ++seed) {
    const LeakCase leak = make_leak_case(seed);
    SCOPED_TRACE(fmt::format("seed {}: clean twin of {}", seed, leak.name()));
    const Trace run = build_run(*leak.source, leak.clean_spec);
    const LeakReport full = find_leaks(run);
    EXPECT_EQ(full.verdict, LeakVerdict::no_growth);
    EXPECT_EQ(full.retained_bytes, 0u);
    // Every cut, for each source once without jitter and once with: jitter never makes retained memory grow.
    if ((seed - 1) / sources().size() % 3 != 0) continue;
    for (std::size_t steps = 1; steps < kRunSteps; ++steps) {
      ASSERT_FALSE(find_leaks(cut_after(run, steps)).leak()) << "cut after " << steps << " steps";
    }
  }
}

TEST(LeakSuite, CacheThatGrowsForFiveStepsThenStopsIsWarmupOnceStopped) {
  constexpr std::size_t kCacheSteps = 5;
  for (std::uint64_t seed = 101; seed <= 112; ++seed) {
    std::mt19937_64 random(seed);
    const Source& source = sources()[seed % sources().size()];
    const double share = log_uniform(random, 0.001, 0.05);
    const std::size_t first = std::uniform_int_distribution<std::size_t>(0, 3)(random);
    RunSpec spec;
    spec.kept_at = std::uniform_real_distribution<double>(0, 1)(random);
    if (seed % 2 == 0) spec.jitter = jitter_factors(random, kRunSteps);
    const double entry = share * static_cast<double>(source.trace.peak_live_bytes);
    for (std::size_t step = first; step < first + kCacheSteps; ++step) {
      spec.kept[step] = scaled(static_cast<std::uint64_t>(entry), spec.jitter.empty() ? 1.0 : spec.jitter[step]);
    }
    SCOPED_TRACE(fmt::format("seed {}: {} cache of {:.3f}% of peak in steps {}..{}", seed, source.file,
                             100 * share, first, first + kCacheSteps - 1));
    const Trace run = build_run(source, spec);

    const LeakReport full = find_leaks(run);
    EXPECT_EQ(full.verdict, LeakVerdict::warmup_growth);
    std::uint64_t cached_after_first_step = 0;
    for (const auto& [step, bytes] : spec.kept) cached_after_first_step += step == 0 ? 0 : bytes;
    EXPECT_EQ(full.retained_bytes, cached_after_first_step);
    // The last entry is confirmed at the end of the step after it; two step ends without growth make it stopped.
    const std::size_t stopped_by = first + kCacheSteps + 3;
    for (std::size_t steps = 1; steps <= kRunSteps; ++steps) {
      if (steps > LeakWatch::kMinSteps && steps < stopped_by) continue;  // still filling: looks like a leak
      ASSERT_FALSE(find_leaks(cut_after(run, steps)).leak()) << "cut after " << steps << " steps";
    }
  }
}

// The real pair, as recorded: a generator that keeps every batch it made (one batch of 16x96x96x3 float32 per
// step), and the same run without it.
TEST(LeakSuite, RealRetainedBatchesTraceLeaksOneBatchPerStep) {
  constexpr double kBatchBytes = 16.0 * 96 * 96 * 3 * 4;  // 1,769,472
  const Trace trace = read_trace(trace_path("leak-retained-batches-resnet18.trace"));
  const LeakReport report = find_leaks(trace);
  ASSERT_TRUE(report.leak()) << to_string(report.verdict);
  EXPECT_EQ(report.steps, 12u);
  EXPECT_NEAR(report.bytes_per_step, kBatchBytes, kRateTolerance * kBatchBytes);
  EXPECT_DOUBLE_EQ(report.allocations_per_step, 1.0);
  EXPECT_DOUBLE_EQ(report.growth_every_steps, 1.0);
  // The batch of step 0 is warm-up to the watch; those of steps 1..10 have outlived the step after theirs.
  ASSERT_EQ(report.groups.size(), 1u);
  EXPECT_EQ(report.groups[0].allocations, 10u);
  EXPECT_EQ(report.groups[0].smallest, static_cast<std::uint64_t>(kBatchBytes));
  EXPECT_EQ(report.groups[0].largest, static_cast<std::uint64_t>(kBatchBytes));
  EXPECT_EQ(report.groups[0].first_step, 1);
  EXPECT_EQ(report.groups[0].last_step, 10);
  // Found within 6 steps of the first leaking step the watch can see (step 1).
  EXPECT_TRUE(find_leaks(cut_after(trace, 1 + kFoundWithinSteps + 1)).leak());
  for (std::size_t steps = 1; steps <= LeakWatch::kMinSteps; ++steps) {
    EXPECT_FALSE(find_leaks(cut_after(trace, steps)).leak()) << steps << " steps";
  }
}

TEST(LeakSuite, RealCleanTwinIsNeverALeak) {
  const Trace trace = read_trace(trace_path("leak-clean-resnet18.trace"));
  const LeakReport report = find_leaks(trace);
  EXPECT_EQ(report.verdict, LeakVerdict::no_growth);
  EXPECT_EQ(report.steps, 12u);
  EXPECT_EQ(report.retained_bytes, 0u);
  for (std::size_t steps = 1; steps <= trace.steps.size(); ++steps) {
    EXPECT_FALSE(find_leaks(cut_after(trace, steps)).leak()) << steps << " steps";
  }
}

}  // namespace
}  // namespace plimsoll::telemetry
