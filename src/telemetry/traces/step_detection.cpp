// Training steps of a trace without step markers, from the repeating pattern of its allocations (detect_steps).
//
// A training loop makes the same allocations and frees, of the same sizes, in the same order, every step. So the
// trace's sequence of (allocate or free, bytes) symbols is periodic where the steps are, and the period is one
// step. The method, in three passes, each linear in the trace:
// 1. Candidate periods: fingerprints of 8 consecutive symbols vote for the distance to their previous occurrence.
//    Repeated layers inside a step vote for short distances too, so candidates are ranked by votes x distance
//    (how much of the trace the distance explains) and the best few go on.
// 2. Each candidate's longest stretch where the pattern follows itself one period later, differences allowed at
//    a cost and a few inserted or missing events skipped. The period is the candidate whose stretch covers the
//    most of the trace; a layer's period covers one step's layers at most, twice the step covers no more than the
//    step itself, so the smaller one wins a near tie.
// 3. Step boundaries: the stretch ends where the last step ends (the teardown after it frees in another order;
//    where skipping carried the stretch a few events into the teardown, the end of the exact repetition is
//    taken). Earlier steps are one period back each, placed where their opening events best match the next
//    step's (within a tenth of a period, so steps a few events longer or shorter are followed). A first step that
//    differs in length (warm-up: optimizer state made, caches filled) is found by an opening that matches exactly
//    for a few events, up to two periods back.
// docs/leaks.md ("Steps without markers") gives the accuracy on the shared traces and the limits.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "plimsoll/trace.hpp"

namespace plimsoll {
namespace {

constexpr std::size_t kMinPeriod = 8;            // a shorter repeating unit is a loop inside a step, not a step
constexpr std::size_t kGram = 8;                 // symbols per fingerprint (pass 1)
constexpr std::size_t kCandidates = 16;          // periods checked in full (pass 2)
constexpr std::size_t kFingerprintsKept = std::size_t{1} << 17;  // sampled fingerprints: memory stays bounded
constexpr long kMismatchCost = 4;                // a run survives one differing event per 4 equal ones, no more
constexpr std::size_t kOpening = 64;             // symbols compared to place a step's start (pass 3)
constexpr std::size_t kExactOpening = 4;         // every step opens exactly like the next one for this many events

std::uint64_t mix(std::uint64_t value) {
  // splitmix64's finalizer: fingerprints and their sampling need well-spread bits.
  value += 0x9e3779b97f4a7c15ULL;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ULL;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebULL;
  return value ^ (value >> 31);
}

// The events that change what is live, one symbol each (kind and size), with their index in Trace::events.
struct Pattern {
  std::vector<std::uint64_t> symbols;
  std::vector<std::size_t> event_of;
};

Pattern pattern_of(const Trace& trace) {
  Pattern pattern;
  pattern.symbols.reserve(trace.allocations + trace.frees);
  pattern.event_of.reserve(trace.allocations + trace.frees);
  std::vector<std::uint64_t> slot_bytes(trace.slots, 0);
  for (std::size_t index = 0; index < trace.events.size(); ++index) {
    const TraceEvent& event = trace.events[index];
    const bool allocate = event.kind == TraceEvent::Kind::allocate;
    if (!allocate && event.kind != TraceEvent::Kind::free) continue;
    if (event.slot >= slot_bytes.size()) slot_bytes.resize(std::size_t{event.slot} + 1, 0);
    if (allocate) slot_bytes[event.slot] = event.bytes;
    const std::uint64_t bytes = slot_bytes[event.slot];
    pattern.symbols.push_back(mix(bytes * 2 + (allocate ? 1 : 0)));
    pattern.event_of.push_back(index);
  }
  return pattern;
}

// Pass 1: distances at which stretches of the pattern recur, the most telling first.
std::vector<std::size_t> candidate_periods(const std::vector<std::uint64_t>& symbols) {
  const std::size_t count = symbols.size();
  if (count < 2 * kMinPeriod || count < kGram) return {};
  // Keeping only fingerprints with low bits zero samples the same stretches in every step.
  std::uint64_t sample_mask = 0;
  while ((sample_mask + 1) * kFingerprintsKept < count) sample_mask = sample_mask * 2 + 1;

  std::unordered_map<std::uint64_t, std::size_t> last_seen;
  std::unordered_map<std::size_t, std::uint64_t> votes;
  for (std::size_t start = 0; start + kGram <= count; ++start) {
    std::uint64_t fingerprint = 0;
    for (std::size_t offset = 0; offset < kGram; ++offset) fingerprint = mix(fingerprint ^ symbols[start + offset]);
    if ((fingerprint & sample_mask) != 0) continue;
    const auto [seen, first] = last_seen.try_emplace(fingerprint, start);
    if (first) continue;
    const std::size_t distance = start - seen->second;
    seen->second = start;
    if (distance >= kMinPeriod && 2 * distance <= count) ++votes[distance];
  }
  std::vector<std::pair<std::uint64_t, std::size_t>> ranked;  // (votes x distance, distance)
  ranked.reserve(votes.size());
  for (const auto& [distance, count_of_votes] : votes) ranked.emplace_back(count_of_votes * distance, distance);
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::size_t> periods;
  for (std::size_t i = 0; i < ranked.size() && i < kCandidates; ++i) periods.push_back(ranked[i].second);
  return periods;
}

// Pass 2: the longest stretch where the pattern follows itself one period later. Two positions walk along,
// `period` apart to begin with; a few events inserted or missing on one side (a step that differs a little) are
// skipped to fall back in step, at a cost, so the stretch survives them; a long difference ends it.
struct Run {
  std::size_t period = 0;
  std::size_t begin = 0;        // first event of the stretch
  std::size_t end = 0;          // one past its last event: where the last step ends
  std::size_t last_start = 0;   // the event the leading position met at `end`: where the last step starts
  std::size_t covered() const { return end - begin; }
};

constexpr std::size_t kResync = 4;    // events skipped at most, on either side, to fall back in step
constexpr std::size_t kConfirm = 4;   // equal events in a row that confirm a skip

bool equal_stretch(const std::vector<std::uint64_t>& symbols, std::size_t a, std::size_t b, std::size_t length) {
  if (a + length > symbols.size() || b + length > symbols.size()) return false;
  return std::equal(symbols.begin() + static_cast<std::ptrdiff_t>(a),
                    symbols.begin() + static_cast<std::ptrdiff_t>(a + length),
                    symbols.begin() + static_cast<std::ptrdiff_t>(b));
}

// After a difference at (a, b): how far to move each side to fall back in step. The cheapest of: `d` changed
// events on both sides (data-dependent sizes), `d` events only on the b side (inserted) or only on the a side
// (missing), for d up to kResync, confirmed by kConfirm equal events after; else one changed event.
struct Resync {
  std::size_t a = 1;
  std::size_t b = 1;
  std::size_t cost = 1;
};

Resync resync(const std::vector<std::uint64_t>& symbols, std::size_t a, std::size_t b) {
  for (std::size_t d = 1; d <= kResync; ++d) {
    if (equal_stretch(symbols, a + d, b + d, kConfirm)) return Resync{d, d, d};
    if (equal_stretch(symbols, a, b + d, kConfirm)) return Resync{0, d, d};
    if (a + d + kConfirm <= b && equal_stretch(symbols, a + d, b, kConfirm)) return Resync{d, 0, d};
  }
  return Resync{};
}

Run longest_run(const std::vector<std::uint64_t>& symbols, std::size_t period) {
  Run best{period, 0, 0, 0};
  long score = 0;
  long best_score = 0;
  std::size_t earlier = 0;  // walks one step behind
  std::size_t later = period;
  std::size_t begin = 0;
  while (later < symbols.size()) {
    if (symbols[earlier] == symbols[later]) {
      ++earlier;
      ++later;
      if (++score > best_score) {
        best_score = score;
        best = Run{period, begin, later, earlier};
      }
      continue;
    }
    // Without a run to keep, any difference starts afresh: looking for a skip would be wasted (and it is most of
    // the time spent on a wrong period).
    const Resync step = score >= kMismatchCost ? resync(symbols, earlier, later) : Resync{};
    earlier += step.a;
    later += step.b;
    score -= kMismatchCost * static_cast<long>(step.cost);
    if (score < 0) {  // start afresh, one period apart again, always further on than the last fresh start
      score = 0;
      if (earlier <= begin) earlier = begin + 1;
      begin = earlier;
      later = earlier + period;
    }
  }
  return best;
}

// The longest stretch where symbols[i] == symbols[i + period] exactly in place (mismatches allowed at a cost, no
// skips), as a Run: where the repetition at exactly one period stops.
Run in_place_run(const std::vector<std::uint64_t>& symbols, std::size_t period) {
  Run best{period, 0, 0, 0};
  long score = 0;
  long best_score = 0;
  std::size_t begin = 0;
  for (std::size_t i = 0; i + period < symbols.size(); ++i) {
    score += symbols[i] == symbols[i + period] ? 1 : -kMismatchCost;
    if (score < 0) {
      score = 0;
      begin = i + 1;
    } else if (score > best_score) {
      best_score = score;
      best = Run{period, begin, i + 1 + period, i + 1};
    }
  }
  return best;
}

std::optional<Run> steady_run(const std::vector<std::uint64_t>& symbols) {
  std::vector<std::size_t> periods = candidate_periods(symbols);
  std::sort(periods.begin(), periods.end());
  std::optional<Run> best;
  for (const std::size_t period : periods) {
    const Run run = longest_run(symbols, period);
    // At least two steps in a row: the stretch spans (nearly) two whole periods.
    if (10 * run.covered() < 19 * period) continue;
    // Smaller periods come first; a larger one must cover clearly more (2%) to win.
    if (!best || 50 * run.covered() > 51 * best->covered()) best = run;
  }
  if (!best) return best;
  // Skipping lets the stretch run on into the teardown when it frees what a step frees first (the previous step's
  // outputs): an end a few events too late. Where the repetition in place ends within the last period, that end
  // is the step's; further back, the in-place stretch stopped at a step that differs and the skipping one is right.
  const Run in_place = in_place_run(symbols, best->period);
  if (in_place.end <= best->end && in_place.end + best->period >= best->end) {
    best->end = in_place.end;
    best->last_start = in_place.last_start;
  }
  return best;
}

// Equal symbols among the first `length` of the stretches starting at `a` and `b`, skipping a few inserted or
// missing events as longest_run does.
std::size_t matching(const std::vector<std::uint64_t>& symbols, std::size_t a, std::size_t b, std::size_t length) {
  std::size_t equal = 0;
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < length && j < length && a + i < symbols.size() && b + j < symbols.size()) {
    if (symbols[a + i] == symbols[b + j]) {
      ++equal;
      ++i;
      ++j;
      continue;
    }
    const Resync step = resync(symbols, a + i, b + j);
    i += step.a;
    j += step.b;
  }
  return equal;
}

std::size_t common_prefix(const std::vector<std::uint64_t>& symbols, std::size_t a, std::size_t b) {
  std::size_t length = 0;
  while (a + length < b && b + length < symbols.size() && symbols[a + length] == symbols[b + length]) ++length;
  return length;
}

// Pass 3: step starts (symbol indices), earliest first, given the last step [last_start, last_start + period).
std::vector<std::size_t> step_starts(const std::vector<std::uint64_t>& symbols, std::size_t last_start,
                                     std::size_t period) {
  std::vector<std::size_t> starts{last_start};
  const std::size_t opening = std::min(kOpening, period);
  const std::size_t slack = std::max<std::size_t>(2, period / 10);
  while (true) {
    const std::size_t next = starts.back();
    if (next < period - std::min(period, slack) + kMinPeriod) break;
    // The previous step should start one period earlier, give or take the slack; that can be before the trace's first
    // event (a short warm-up), so the prediction is signed.
    const auto predicted = static_cast<std::ptrdiff_t>(next) - static_cast<std::ptrdiff_t>(period);
    const auto signed_slack = static_cast<std::ptrdiff_t>(slack);
    const std::size_t lowest = predicted > signed_slack ? static_cast<std::size_t>(predicted - signed_slack) : 0;
    const std::size_t highest = std::min(static_cast<std::size_t>(predicted + signed_slack), next - kMinPeriod);
    std::size_t best = 0;
    std::size_t best_equal = 0;
    std::size_t best_distance = 0;
    for (std::size_t start = lowest; start <= highest; ++start) {
      // A step opens like the next one from its very first events; the rest of the opening may differ a little.
      if (!equal_stretch(symbols, start, next, std::min(kExactOpening, opening))) continue;
      const std::size_t equal = matching(symbols, start, next, std::min(opening, next - start));
      const auto offset = static_cast<std::ptrdiff_t>(start) - predicted;
      const auto distance = static_cast<std::size_t>(offset < 0 ? -offset : offset);
      if (equal > best_equal || (equal == best_equal && distance < best_distance)) {
        best = start;
        best_equal = equal;
        best_distance = distance;
      }
    }
    if (4 * best_equal < 3 * opening) break;
    starts.push_back(best);
  }

  // A warm-up first step: longer or shorter than the steady ones, opening exactly like them.
  const std::size_t first_steady = starts.back();
  if (first_steady >= period / 3 + kMinPeriod) {
    const std::size_t lowest = first_steady > 2 * period ? first_steady - 2 * period : 0;
    const std::size_t highest = first_steady - period / 3;
    std::size_t best = 0;
    std::size_t best_prefix = 0;
    for (std::size_t start = lowest; start <= highest; ++start) {
      // The latest of equal openings: the model is built before the first step, never after it.
      const std::size_t prefix = common_prefix(symbols, start, first_steady);
      if (prefix >= best_prefix && prefix > 0) {
        best = start;
        best_prefix = prefix;
      }
    }
    if (best_prefix >= std::min(kExactOpening, opening)) starts.push_back(best);
  }
  std::reverse(starts.begin(), starts.end());
  return starts;
}

// Of the steady steps (all but the first, which may be warm-up, when there are three or more), the share of
// symbols that match the step before.
double repeating_fraction(const std::vector<std::uint64_t>& symbols, const std::vector<std::size_t>& starts,
                          std::size_t last_end) {
  std::size_t equal = 0;
  std::size_t compared = 0;
  for (std::size_t k = starts.size() > 2 ? 2 : 1; k < starts.size(); ++k) {
    const std::size_t length = (k + 1 < starts.size() ? starts[k + 1] : last_end) - starts[k];
    const std::size_t longer = std::max(length, starts[k] - starts[k - 1]);
    equal += matching(symbols, starts[k - 1], starts[k], longer);
    compared += longer;
  }
  return compared == 0 ? 0.0 : static_cast<double>(equal) / static_cast<double>(compared);
}

}  // namespace

const char* to_string(StepSource source) {
  switch (source) {
    case StepSource::none:
      return "none";
    case StepSource::markers:
      return "markers";
    case StepSource::detected:
      return "detected";
  }
  return "unknown";
}

StepDetection detect_steps(const Trace& trace) {
  StepDetection detection;
  const Pattern pattern = pattern_of(trace);
  const std::optional<Run> run = steady_run(pattern.symbols);
  if (!run) {
    detection.summary = fmt::format(
        "no steps: the trace has no step markers and no allocation pattern of {} or more events repeats twice in a "
        "row in its {} allocations and frees; add 'step N begin' / 'step N end' markers (plimsoll.step())",
        kMinPeriod, pattern.symbols.size());
    return detection;
  }
  const std::size_t last_end = run->end;
  const std::vector<std::size_t> starts = step_starts(pattern.symbols, run->last_start, run->period);
  for (std::size_t k = 0; k < starts.size(); ++k) {
    const std::size_t end = k + 1 < starts.size() ? pattern.event_of[starts[k + 1]] : pattern.event_of[last_end - 1] + 1;
    detection.steps.push_back(TraceStep{static_cast<int>(k), pattern.event_of[starts[k]], end});
  }
  detection.period_events = run->period;
  detection.repeating_fraction = repeating_fraction(pattern.symbols, starts, last_end);
  detection.summary = fmt::format(
      "{} steps detected from the repeating allocation pattern (no step markers): {} allocations and frees per "
      "step, {:.1f}% of them repeat the step before",
      detection.steps.size(), detection.period_events, 100.0 * detection.repeating_fraction);
  return detection;
}

void fill_missing_steps(Trace& trace) {
  if (!trace.steps.empty()) {
    if (trace.step_source == StepSource::none) trace.step_source = StepSource::markers;
    return;
  }
  trace.step_detection = detect_steps(trace);
  trace.steps = trace.step_detection.steps;
  trace.step_source = trace.steps.empty() ? StepSource::none : StepSource::detected;
}

std::vector<bool> step_boundaries(const Trace& trace) {
  std::vector<bool> boundary(trace.events.size() + 1, false);
  if (trace.steps.empty()) return boundary;
  boundary[trace.steps.front().begin] = true;
  for (std::size_t k = 0; k + 1 < trace.steps.size(); ++k) boundary[trace.steps[k].end] = true;
  return boundary;
}

}  // namespace plimsoll
