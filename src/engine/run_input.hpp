#pragma once
// What a whole-run packing packs (run_packing.hpp), checked: how far into a trace (through a step, or whole), and
// the limit it is packed against. Shared by `plimsoll run-plan` and the bench's plimsoll_run_bound, so both refuse
// the same bad input with the same messages.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "plimsoll/trace.hpp"

namespace plimsoll::engine {

/// --through-step as given (a signed number, so that -1 is not read as 2^64 - 1): the step index, or none. Throws
/// InvalidArgument naming the value and the fix when it is negative.
std::optional<std::size_t> step_index(std::optional<std::int64_t> given);

/// The end (an index into trace.events, exclusive) of the events through step `through` (an index into
/// trace.steps), or of the whole trace when none is given. Throws InvalidArgument naming the trace, how many steps
/// it has and the fix when `through` is past its last step.
std::size_t run_end(const Trace& trace, std::optional<std::size_t> through);

/// The limit replay's options give a trace with this peak of live bytes: ceil(over_live x peak) for
/// --limit-over-live, peak + plus_mib MiB for --limit-plus-mib (exactly one above 0), in whole granules: how many
/// the heap may map (Heap::allocate_at refuses a granule that would pass the limit).
std::uint64_t limit_bytes(std::uint64_t peak_live, double over_live, double plus_mib);

/// The limit a trace is packed against: limit_bytes with the options given, or with neither (both 0) the issue-16
/// target's: 1.01 x peak live over 1 GiB live, peak live + 4 MiB under.
std::uint64_t run_limit(std::uint64_t peak_live, double over_live, double plus_mib);

/// A trace read and checked, ready to pack: its end (run_end), its limit (run_limit) and where step 0 ends (an
/// index into its events; 0 without steps).
struct PreparedRun {
  Trace trace;
  std::size_t end = 0;
  std::uint64_t limit = 0;
  std::size_t step0_end = 0;
};

/// Every trace checked (the step index, the step, the limit) before any is packed: a bad last trace must not cost
/// the others' minutes. Throws InvalidArgument naming the trace and the fix.
std::vector<PreparedRun> prepare_runs(std::vector<Trace> traces, std::optional<std::int64_t> through, double over_live,
                                      double plus_mib);

/// The tick (StepObservation's count of allocations and frees) at which events [0, end) have all happened.
std::uint32_t tick_at(const Trace& trace, std::size_t end);

}  // namespace plimsoll::engine
