#include "telemetry/leaks/leak_watch.hpp"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

#include "plimsoll/error.hpp"

namespace plimsoll::telemetry {
namespace {

// Groups are keyed by call site and tag when the site is known; otherwise by position in the step (and whether it
// was made between steps) and tag. The site, when known, already says where: its position would split one leak
// into as many groups as the code path has shapes.
using GroupKey = std::tuple<std::uint32_t, std::uint16_t, std::uint32_t, bool>;

}  // namespace

const char* to_string(LeakVerdict verdict) {
  switch (verdict) {
    case LeakVerdict::too_few_steps:
      return "too_few_steps";
    case LeakVerdict::no_growth:
      return "no_growth";
    case LeakVerdict::warmup_growth:
      return "warmup_growth";
    case LeakVerdict::leak:
      return "leak";
  }
  return "unknown";
}

// Invariants, after every public call:
// - live_ holds exactly the watched allocations not yet freed; each is counted in exactly one of warmup_
//   (ordinal 0), retained_ (ordinals 1 .. completed_ - 2) or recent_[ordinal] (ordinals completed_ - 1 and
//   completed_, never 0).
// - window_ holds one sample per step end, the last kWindowSteps + 1 of them, ordinals consecutive.
LeakWatch::Totals& LeakWatch::totals_of(std::uint64_t ordinal) {
  if (ordinal == 0) return warmup_;
  if (ordinal + 2 <= completed_) return retained_;
  return recent_[ordinal];
}

void LeakWatch::on_allocate(std::uint64_t id, std::uint64_t bytes, std::uint16_t tag, std::uint32_t site) {
  if (!started_) return;
  on_free(id);  // a live id was freed unseen (a lost event, a reused address): its old record goes first
  const bool between_steps = !open_step_.has_value();
  const Live live{.bytes = bytes,
                  .ordinal = completed_,
                  .site = site,
                  .position = ++next_position_,
                  .tag = tag,
                  .between_steps = between_steps};
  live_.emplace(id, live);
  Totals& totals = totals_of(live.ordinal);
  totals.bytes += bytes;
  ++totals.allocations;
}

void LeakWatch::on_free(std::uint64_t id) {
  const auto found = live_.find(id);
  if (found == live_.end()) return;
  Totals& totals = totals_of(found->second.ordinal);
  totals.bytes -= found->second.bytes;
  --totals.allocations;
  live_.erase(found);
}

void LeakWatch::on_step_begin(int step) {
  if (open_step_) {
    throw InvalidState(fmt::format("leak watch: step {} begins while step {} is still open; end step {} first",
                                   step, *open_step_, *open_step_));
  }
  started_ = true;
  open_step_ = step;
  next_position_ = 0;  // positions count within the step, whatever was made between steps
}

void LeakWatch::on_step_end(int step) {
  if (!open_step_) {
    throw InvalidState(fmt::format("leak watch: step {} ends but no step is open; begin step {} first", step, step));
  }
  if (*open_step_ != step) {
    throw InvalidState(fmt::format("leak watch: step {} ends while step {} is open; end step {} instead", step,
                                   *open_step_, *open_step_));
  }
  const std::uint64_t ended = completed_;
  ++completed_;
  open_step_.reset();
  next_position_ = 0;

  // The step before the one that just ended is settled: what it made and is still live has outlived a step end
  // that was not its own, so it is retained.
  if (ended >= 2) {
    const auto settled = recent_.find(ended - 1);
    if (settled != recent_.end()) {
      retained_.bytes += settled->second.bytes;
      retained_.allocations += settled->second.allocations;
      if (settled->second.allocations > 0) ever_retained_ = true;
      recent_.erase(settled);
    }
  }
  if (!window_.empty() && retained_.bytes > window_.back().retained.bytes) last_growth_end_ = ended;
  window_.push_back(StepSample{.ordinal = ended, .number = step, .retained = retained_});
  if (window_.size() > kWindowSteps + 1) window_.pop_front();
  analysis_ = analyze();
}

// The verdict from the window's retained totals; docs/leaks.md gives the reasons for each rule.
LeakWatch::Analysis LeakWatch::analyze() const {
  Analysis analysis;
  if (window_.empty()) return analysis;
  analysis.oldest_window_ordinal = window_.front().ordinal;
  if (last_growth_end_) analysis.steps_since_growth = static_cast<std::size_t>(completed_ - 1 - *last_growth_end_);

  // Step ends (window indices) at which retained memory grew, and by how much in all.
  std::vector<std::size_t> growths;
  double gross = 0;
  for (std::size_t index = 1; index < window_.size(); ++index) {
    const std::uint64_t before = window_[index - 1].retained.bytes;
    const std::uint64_t after = window_[index].retained.bytes;
    if (after > before) {
      growths.push_back(index);
      gross += static_cast<double>(after - before);
    }
  }
  analysis.growth_steps = growths.size();
  if (!growths.empty()) {
    // Growth seen at a step end was made by the step before it.
    analysis.first_growth_step = window_[growths.front() - 1].number;
    analysis.last_growth_step = window_[growths.back() - 1].number;
  }

  bool leaking = false;
  if (growths.size() >= 2) {
    const std::size_t first = growths.front();
    const std::size_t last = growths.back();
    std::size_t longest_gap = 0;
    for (std::size_t i = 1; i < growths.size(); ++i) longest_gap = std::max(longest_gap, growths[i] - growths[i - 1]);
    const double span = static_cast<double>(last - first);
    analysis.growth_every_steps = span / static_cast<double>(growths.size() - 1);

    const auto signed_change = [](std::uint64_t from, std::uint64_t to) {
      return static_cast<double>(to) - static_cast<double>(from);
    };
    const StepSample& start = window_[first];
    const StepSample& end = window_[last];
    const double bytes_per_step = signed_change(start.retained.bytes, end.retained.bytes) / span;
    const double allocations_per_step = signed_change(start.retained.allocations, end.retained.allocations) / span;
    // Growth, not churn: frees of retained memory cancel growth (a cache that replaces its entries), so at least
    // half of what was added since just before the first growth must still be there.
    const double net = signed_change(window_[first - 1].retained.bytes, window_.back().retained.bytes);
    // Still growing at the steady rate: the later half of that stretch holds at least half of what the rate
    // predicts for it. Growth that happened early in the window and then only wobbled (a cache that filled, then
    // swaps entries of other sizes) fails this.
    const std::size_t recent_steps = (window_.size() - first) / 2;
    const double recent = signed_change(window_[window_.size() - 1 - recent_steps].retained.bytes,
                                        window_.back().retained.bytes);
    const std::size_t since = window_.size() - 1 - last;

    leaking = completed_ > kMinSteps && longest_gap <= kWindowSteps / 2 && since < 2 * longest_gap &&
              bytes_per_step > 0 && 2 * net >= gross &&
              2 * recent >= bytes_per_step * static_cast<double>(recent_steps);
    if (leaking) {
      analysis.bytes_per_step = bytes_per_step;
      analysis.allocations_per_step = std::max(0.0, allocations_per_step);
    }
  }

  if (completed_ <= kMinSteps) {
    analysis.verdict = LeakVerdict::too_few_steps;
  } else if (leaking) {
    analysis.verdict = LeakVerdict::leak;
  } else {
    analysis.verdict = ever_retained_ ? LeakVerdict::warmup_growth : LeakVerdict::no_growth;
  }
  return analysis;
}

std::optional<int> LeakWatch::step_number(std::uint64_t ordinal) const {
  if (window_.empty() || ordinal < window_.front().ordinal || ordinal > window_.back().ordinal) return std::nullopt;
  return window_[static_cast<std::size_t>(ordinal - window_.front().ordinal)].number;
}

LeakReport LeakWatch::report() const {
  LeakReport report;
  report.verdict = analysis_.verdict;
  report.steps = static_cast<std::size_t>(completed_);
  report.bytes_per_step = analysis_.bytes_per_step;
  report.allocations_per_step = analysis_.allocations_per_step;
  report.growth_every_steps = analysis_.growth_every_steps;
  report.growth_steps = analysis_.growth_steps;
  report.steps_since_growth = analysis_.steps_since_growth;
  report.first_growth_step = analysis_.first_growth_step;
  report.last_growth_step = analysis_.last_growth_step;
  report.retained_bytes = retained_.bytes;
  report.retained_allocations = retained_.allocations;
  report.warmup_bytes = warmup_.bytes;

  // Retained allocations made by the window's steps (never the first step's: that is warm-up).
  const std::uint64_t oldest = std::max<std::uint64_t>(1, analysis_.oldest_window_ordinal);
  std::map<GroupKey, LeakGroup> groups;
  for (const auto& [id, live] : live_) {
    if (live.ordinal < oldest || live.ordinal + 2 > completed_) continue;
    const bool by_site = live.site != 0;
    const GroupKey key{live.site, live.tag, by_site ? 0 : live.position, by_site ? false : live.between_steps};
    const int step = step_number(live.ordinal).value_or(0);
    const auto [found, inserted] = groups.try_emplace(key);
    LeakGroup& group = found->second;
    if (inserted) {
      group = LeakGroup{.site = live.site,
                        .tag = live.tag,
                        .position = std::get<2>(key),
                        .between_steps = std::get<3>(key),
                        .smallest = live.bytes,
                        .largest = live.bytes,
                        .first_step = step,
                        .last_step = step};
    }
    group.bytes += live.bytes;
    ++group.allocations;
    group.smallest = std::min(group.smallest, live.bytes);
    group.largest = std::max(group.largest, live.bytes);
    group.first_step = std::min(group.first_step, step);
    group.last_step = std::max(group.last_step, step);
  }
  report.groups.reserve(groups.size());
  for (auto& entry : groups) report.groups.push_back(entry.second);
  // Most bytes first; ties in a fixed order (the key's), so reports do not depend on hash order.
  std::stable_sort(report.groups.begin(), report.groups.end(),
                   [](const LeakGroup& a, const LeakGroup& b) { return a.bytes > b.bytes; });
  return report;
}

LeakReport find_leaks(const Trace& trace) {
  LeakWatch watch;
  const auto feed = [&](std::size_t begin, std::size_t end) {
    for (std::size_t index = begin; index < end; ++index) {
      const TraceEvent& event = trace.events[index];
      if (event.kind == TraceEvent::Kind::allocate) {
        watch.on_allocate(event.slot, event.bytes, event.tag, event.site);
      } else if (event.kind == TraceEvent::Kind::free) {
        watch.on_free(event.slot);
      }
    }
  };
  const TraceStep* previous = nullptr;
  for (const TraceStep& step : trace.steps) {
    // Events between the previous step's end and this step's begin belong to this step (markers are skipped by
    // feed; detected steps have no markers and no gap).
    if (previous != nullptr) feed(previous->end, step.begin);
    watch.on_step_begin(step.number);
    feed(step.begin, step.end);
    watch.on_step_end(step.number);
    previous = &step;
  }
  return watch.report();
}

std::string describe_origin(const LeakGroup& group, std::span<const std::string> tags,
                            std::span<const std::string> sites) {
  std::string origin;
  if (group.site != 0) {
    origin = group.site < sites.size() && !sites[group.site].empty() ? sites[group.site]
                                                                     : fmt::format("call site #{}", group.site);
  } else if (group.between_steps) {
    origin = fmt::format("allocation #{} between steps", group.position);
  } else {
    origin = fmt::format("allocation #{} of the step", group.position);
  }
  if (group.tag != 0) {
    origin += group.tag < tags.size() ? fmt::format(", tag '{}'", tags[group.tag])
                                      : fmt::format(", tag #{}", group.tag);
  }
  return origin;
}

}  // namespace plimsoll::telemetry
