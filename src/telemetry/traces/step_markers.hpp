#pragma once
// Training steps from marker texts, for every trace reader: "step N begin" ... "step N end" brackets the events
// of step N. Any other marker text (including other texts that start with "step") is a plain note.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plimsoll/trace.hpp"

namespace plimsoll::telemetry {

class StepMarkers {
 public:
  /// Feeds the marker at `event_index` (its `line` in the file, for later messages). Returns what is wrong with
  /// it, and the fix, when it breaks the begin/end pairing; nothing otherwise.
  std::optional<std::string> on_marker(std::string_view text, std::size_t event_index, std::uint32_t line);

  struct Unfinished {
    std::uint32_t line = 0;  // of the "begin" marker
    std::string message;
  };
  /// At the end of the file: the step that began and never ended, if any.
  std::optional<Unfinished> unfinished() const;

  std::vector<TraceStep>& steps() { return steps_; }

 private:
  struct OpenStep {
    int number = 0;
    std::size_t begin_marker = 0;  // event index of "step N begin"
    std::uint32_t line = 0;
  };
  std::vector<TraceStep> steps_;
  std::optional<OpenStep> open_;
};

}  // namespace plimsoll::telemetry
