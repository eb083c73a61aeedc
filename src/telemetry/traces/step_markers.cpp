#include "telemetry/traces/step_markers.hpp"

#include <charconv>
#include <system_error>

#include <fmt/format.h>

namespace plimsoll::telemetry {
namespace {

// The next blank-separated word of `rest`, removed from it.
std::string_view next_word(std::string_view& rest) {
  const std::size_t start = rest.find_first_not_of(" \t\r");
  if (start == std::string_view::npos) {
    rest = {};
    return {};
  }
  rest.remove_prefix(start);
  const std::size_t length = std::min(rest.find_first_of(" \t\r"), rest.size());
  const std::string_view word = rest.substr(0, length);
  rest.remove_prefix(length);
  return word;
}

}  // namespace

std::optional<std::string> StepMarkers::on_marker(std::string_view text, std::size_t event_index, std::uint32_t line) {
  std::string_view rest = text;
  if (next_word(rest) != "step") return std::nullopt;
  const std::string_view number_text = next_word(rest);
  const std::string_view boundary = next_word(rest);
  // Only the exact shape "step N begin|end" is a step marker.
  if ((boundary != "begin" && boundary != "end") || !next_word(rest).empty()) return std::nullopt;

  int number = 0;
  const auto [end, error] = std::from_chars(number_text.data(), number_text.data() + number_text.size(), number);
  if (error != std::errc() || end != number_text.data() + number_text.size()) {
    return fmt::format("step number '{}' is not an integer; write 'step N {}' with N a whole number",
                       number_text.substr(0, 40), boundary);
  }
  if (boundary == "begin") {
    if (open_) {
      return fmt::format("step {} begins while step {} (begun at line {}) is still open; add 'step {} end' before "
                         "this marker",
                         number, open_->number, open_->line, open_->number);
    }
    open_ = OpenStep{number, event_index, line};
    return std::nullopt;
  }
  if (!open_) {
    return fmt::format("'step {} end' without a matching 'step {} begin'; add the begin marker before the step's "
                       "events or remove this one",
                       number, number);
  }
  if (open_->number != number) {
    return fmt::format("'step {} end' closes step {} (begun at line {}); write 'step {} end' or fix the begin marker",
                       number, open_->number, open_->line, open_->number);
  }
  steps_.push_back(TraceStep{number, open_->begin_marker + 1, event_index});
  open_.reset();
  return std::nullopt;
}

std::optional<StepMarkers::Unfinished> StepMarkers::unfinished() const {
  if (!open_) return std::nullopt;
  return Unfinished{open_->line, fmt::format("step {} begins here but never ends; add 'step {} end' after its events",
                                             open_->number, open_->number)};
}

}  // namespace plimsoll::telemetry
