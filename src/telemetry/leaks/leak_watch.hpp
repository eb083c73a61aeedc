#pragma once
// Leak watch: answers "why does memory grow every step?" by finding allocations that outlive the training step
// that made them and pile up, and by telling such a leak apart from warm-up growth (optimizer state made in the
// first step, caches that fill for a few steps and then stop).
//
// It is incremental, so one class serves a whole trace (find_leaks) and a running program that feeds it from its
// allocator. Its memory is one record per live allocation plus a fixed window of per-step numbers: a trace of a
// million steps costs no more than one of ten with the same live allocations. docs/leaks.md explains the method.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "plimsoll/trace.hpp"

namespace plimsoll::telemetry {

enum class LeakVerdict : std::uint8_t {
  too_few_steps,  // 3 steps or fewer: warm-up cannot be told from growth yet, so never a leak
  no_growth,      // nothing made after the first step outlived the step after it
  warmup_growth,  // memory was retained after warm-up, but that growth has stopped (a cache that filled)
  leak,           // retained memory keeps growing, step after step (or every few steps)
};

/// "too_few_steps", "no_growth", "warmup_growth", "leak" (the JSON spelling).
const char* to_string(LeakVerdict verdict);

/// Live allocations that outlived their step, gathered by where they were made: the call site when the source
/// knows it, otherwise their position within the step (the same code path allocates at the same position).
struct LeakGroup {
  std::uint32_t site = 0;          // index into the caller's call-site table; 0 = unknown
  std::uint16_t tag = 0;           // index into the caller's tag table; 0 = untagged
  std::uint32_t position = 0;      // 1-based position among the step's allocations (used when site is 0)
  bool between_steps = false;      // made between one step's end and the next step's begin
  std::uint64_t bytes = 0;         // live bytes of the group
  std::uint64_t allocations = 0;   // live allocations of the group
  std::uint64_t smallest = 0;      // smallest and largest allocation, in bytes
  std::uint64_t largest = 0;
  int first_step = 0;              // step numbers the group's allocations were made in
  int last_step = 0;
};

struct LeakReport {
  LeakVerdict verdict = LeakVerdict::too_few_steps;
  bool leak() const { return verdict == LeakVerdict::leak; }

  std::size_t steps = 0;             // completed steps seen
  // The growth rate of retained memory while it grows, averaged over whole leak periods (from the first to the
  // last step end in the window at which it grew); 0 unless a leak.
  double bytes_per_step = 0;
  double allocations_per_step = 0;
  double growth_every_steps = 0;     // mean spacing of the step ends at which retained memory grew; 0 if < 2
  std::size_t growth_steps = 0;      // step ends in the window at which retained memory grew
  std::size_t steps_since_growth = 0;  // step ends since the last one at which retained memory grew
  std::optional<int> first_growth_step;  // numbers of the steps whose allocations made the first and the last
  std::optional<int> last_growth_step;   // growth in the window
  std::uint64_t retained_bytes = 0;        // live bytes made after the first step that outlived the next step end
  std::uint64_t retained_allocations = 0;
  std::uint64_t warmup_bytes = 0;          // live bytes made in the first step (optimizer state, ...)
  std::vector<LeakGroup> groups;           // retained allocations of the window's steps, most bytes first
};

class LeakWatch {
 public:
  /// Step ends the verdict looks back over. A leak that adds memory less often than every kWindowSteps / 2 steps
  /// is not seen; older growth (a cache that filled long ago) does not blur the rate of a recent leak.
  static constexpr std::size_t kWindowSteps = 32;
  /// A trace of this many steps or fewer is never called a leak.
  static constexpr std::size_t kMinSteps = 3;

  /// `id` names a live allocation (an address, a trace slot); an id that is still live is taken to have been
  /// freed unseen and starts afresh. Allocations made before the first step begins (building the model) are not
  /// watched; those made between steps count as the next step's.
  void on_allocate(std::uint64_t id, std::uint64_t bytes, std::uint16_t tag = 0, std::uint32_t site = 0);
  /// Frees of ids the watch never saw (made before the first step, or before the watch started) are ignored.
  void on_free(std::uint64_t id);
  /// Throws InvalidState when a step is already open.
  void on_step_begin(int step);
  /// Ends the open step and updates the verdict. Throws InvalidState when no step, or another step, is open.
  void on_step_end(int step);

  /// The verdict as of the last step end; groups are gathered from the allocations live now. O(live allocations).
  LeakReport report() const;

  std::size_t live_allocations() const { return live_.size(); }

 private:
  struct Live {
    std::uint64_t bytes = 0;
    std::uint64_t ordinal = 0;  // which step made it: 0 = the first step seen
    std::uint32_t site = 0;
    std::uint32_t position = 0;
    std::uint16_t tag = 0;
    bool between_steps = false;
  };
  struct Totals {
    std::uint64_t bytes = 0;
    std::uint64_t allocations = 0;
  };
  // Retained totals at one step end.
  struct StepSample {
    std::uint64_t ordinal = 0;  // of the step that ended
    int number = 0;             // its step number
    Totals retained;
  };
  struct Analysis {
    LeakVerdict verdict = LeakVerdict::too_few_steps;
    double bytes_per_step = 0;
    double allocations_per_step = 0;
    double growth_every_steps = 0;
    std::size_t growth_steps = 0;
    std::size_t steps_since_growth = 0;
    std::optional<int> first_growth_step;
    std::optional<int> last_growth_step;
    std::uint64_t oldest_window_ordinal = 0;  // groups gather retained allocations made from this step on
  };

  Totals& totals_of(std::uint64_t ordinal);
  Analysis analyze() const;
  std::optional<int> step_number(std::uint64_t ordinal) const;

  std::unordered_map<std::uint64_t, Live> live_;
  std::uint64_t completed_ = 0;        // steps ended so far; also the ordinal of the step being made
  bool started_ = false;               // a step has begun: allocations from now on are watched
  bool ever_retained_ = false;         // some allocation made after the first step outlived the next step end
  std::optional<std::uint64_t> last_growth_end_;  // ordinal of the last step end at which retained_ grew
  std::optional<int> open_step_;
  std::uint32_t next_position_ = 0;    // allocations made so far in the open step (or since the last step end)
  Totals warmup_;                      // live allocations of ordinal 0
  Totals retained_;                    // live allocations of ordinals 1 .. completed_ - 2: they outlived a step end
  std::map<std::uint64_t, Totals> recent_;  // live allocations of ordinals not yet settled (at most two)
  std::deque<StepSample> window_;      // the last kWindowSteps + 1 step ends
  Analysis analysis_;
};

/// Feeds the trace's steps (Trace::steps: from "step N begin" / "step N end" markers, or found by
/// fill_missing_steps from the repeating allocation pattern) through a LeakWatch:
/// the allocations made before the first step are never watched, and the teardown after the last step end is
/// not fed (it frees everything, leaks included).
LeakReport find_leaks(const Trace& trace);

/// Where a group was made, for people: "site (file:line), tag 'x'" when the call site is known, otherwise
/// "allocation #37 of the step" (or "... between steps"). Names out of the tables' range are shown as indices.
std::string describe_origin(const LeakGroup& group, std::span<const std::string> tags,
                            std::span<const std::string> sites);

}  // namespace plimsoll::telemetry
