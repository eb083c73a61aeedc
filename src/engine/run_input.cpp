// What a whole-run packing packs, checked (run_input.hpp).
#include "engine/run_input.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "plimsoll/error.hpp"

namespace plimsoll::engine {

std::optional<std::size_t> step_index(std::optional<std::int64_t> given) {
  if (!given) return std::nullopt;
  if (*given < 0) {
    throw InvalidArgument(fmt::format("--through-step {}: a step index is 0 or more (0: the first step); give one, "
                                      "or leave it out to pack the whole trace",
                                      *given));
  }
  return static_cast<std::size_t>(*given);
}

std::size_t run_end(const Trace& trace, std::optional<std::size_t> through) {
  if (!through) return trace.events.size();
  if (*through >= trace.steps.size()) {
    const std::size_t n = trace.steps.size();
    const std::string has = n == 0   ? std::string("has no step markers ('# step N begin' / '# step N end')")
                            : n == 1 ? std::string("has 1 step (index 0)")
                                     : fmt::format("has {} steps (indices 0..{})", n, n - 1);
    throw InvalidArgument(fmt::format("{}: {}, no step {}; {}", trace.origin, has, *through,
                                      n == 0 ? "leave out --through-step to pack the whole trace"
                                             : "pass a smaller --through-step, or leave it out to pack the whole "
                                               "trace"));
  }
  return trace.steps[*through].end;
}

std::uint64_t limit_bytes(std::uint64_t peak_live, double over_live, double plus_mib) {
  if ((over_live > 0) == (plus_mib > 0)) {
    throw InvalidArgument("give exactly one limit: --limit-over-live X (a factor above 0) or --limit-plus-mib M "
                          "(MiB above 0)");
  }
  const double limit = over_live > 0 ? std::ceil(over_live * static_cast<double>(peak_live))
                                     : static_cast<double>(peak_live) + plus_mib * static_cast<double>(1ull << 20);
  if (!(limit < 18446744073709551616.0)) {
    throw InvalidArgument("the limit passes 2^64 bytes; give a smaller --limit-over-live or --limit-plus-mib");
  }
  return static_cast<std::uint64_t>(std::ceil(limit));
}

std::uint64_t run_limit(std::uint64_t peak_live, double over_live, double plus_mib) {
  if (over_live == 0 && plus_mib == 0) {  // the issue-16 target: 1.01 x peak live over 1 GiB live, + 4 MiB under
    const bool large = peak_live > (1ull << 30);
    return limit_bytes(peak_live, large ? 1.01 : 0, large ? 0 : 4);
  }
  return limit_bytes(peak_live, over_live, plus_mib);
}

std::vector<PreparedRun> prepare_runs(std::vector<Trace> traces, std::optional<std::int64_t> through, double over_live,
                                      double plus_mib) {
  const std::optional<std::size_t> step = step_index(through);
  std::vector<PreparedRun> runs;
  for (Trace& trace : traces) {
    PreparedRun run;
    run.end = run_end(trace, step);
    try {
      run.limit = run_limit(trace.peak_live_bytes, over_live, plus_mib);
    } catch (const InvalidArgument& error) {
      throw InvalidArgument(fmt::format("{}: {}", trace.origin, error.what()));
    }
    run.step0_end = trace.steps.empty() ? 0 : std::min(trace.steps[0].end, run.end);
    run.trace = std::move(trace);
    runs.push_back(std::move(run));
  }
  return runs;
}

std::uint32_t tick_at(const Trace& trace, std::size_t end) {
  std::uint32_t ticks = 0;
  for (std::size_t i = 0; i < end && i < trace.events.size(); ++i) {
    const TraceEvent::Kind kind = trace.events[i].kind;
    if (kind == TraceEvent::Kind::allocate || kind == TraceEvent::Kind::free) ++ticks;
  }
  return ticks;
}

}  // namespace plimsoll::engine
