// find_job_marker (plimsoll/plan.hpp): "model NAME batch N optimizer OPT ..." as `plimsoll train --record` and the
// generator of ../shared/traces write it.
#include <charconv>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "plimsoll/plan.hpp"

namespace plimsoll {

std::optional<JobMarker> find_job_marker(const Trace& trace) {
  for (const std::string& text : trace.markers) {
    if (!text.starts_with("model ")) continue;
    std::istringstream words(text);
    std::vector<std::string> tokens;
    for (std::string word; words >> word;) tokens.push_back(word);
    JobMarker marker{.text = text};
    if (tokens.size() >= 2) marker.model = tokens[1];
    // After the name, KEY VALUE pairs; only the ones plan needs are read.
    for (std::size_t i = 2; i + 1 < tokens.size(); i += 2) {
      const std::string& key = tokens[i];
      const std::string& value = tokens[i + 1];
      if (key == "optimizer") marker.optimizer = value;
      if (key == "batch") {
        std::uint64_t batch = 0;
        const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), batch);
        if (error == std::errc{} && end == value.data() + value.size() && batch > 0) marker.batch = batch;
      }
    }
    return marker;
  }
  return std::nullopt;
}

}  // namespace plimsoll
