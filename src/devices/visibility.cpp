// CUDA_VISIBLE_DEVICES as the CUDA driver reads it. The driver never reports a bad entry: it silently drops it
// and everything after it, which is why every entry here carries a sentence saying what became of it.
#include <algorithm>
#include <string>
#include <variant>

#include <fmt/format.h>

#include "devices/proc_text.hpp"
#include "plimsoll/device.hpp"

namespace plimsoll {
namespace {

constexpr std::string_view kStopsPrefix = "stops the list: ";
constexpr std::string_view kIgnored = "ignored: after the list stopped";

/// Why an entry ends the list.
struct Stop {
  std::string reason;
};
using Match = std::variant<int, Stop>;

std::string join_with_and(const std::vector<int>& numbers) {
  std::string text;
  for (std::size_t i = 0; i < numbers.size(); ++i) {
    if (i > 0) text += i + 1 == numbers.size() ? " and " : ", ";
    text += std::to_string(numbers[i]);
  }
  return text;
}

std::string describe_device_count(std::size_t count) {
  if (count == 0) return "there are no GPUs";
  if (count == 1) return "there is only GPU 0";
  return fmt::format("there are only GPUs 0 to {}", count - 1);
}

Match match_index(std::string_view text, std::size_t device_count) {
  if (text.front() == '-') return Stop{"a negative index ends the list"};
  const std::optional<std::uint64_t> index = parse_decimal(text);
  if (!index || *index >= device_count) {
    return Stop{fmt::format("no GPU {} ({})", text, describe_device_count(device_count))};
  }
  return static_cast<int>(*index);
}

Match match_uuid_prefix(std::string_view text, std::string_view prefix, const std::vector<std::string>& uuids) {
  std::vector<int> matches;
  for (std::size_t i = 0; i < uuids.size(); ++i) {
    if (std::string_view(uuids[i]).starts_with(prefix)) matches.push_back(static_cast<int>(i));
  }
  if (matches.size() == 1) return matches.front();
  if (matches.size() > 1) {
    return Stop{fmt::format("\"{}\" matches {} GPUs ({}); give more of the UUID", text, matches.size(),
                            join_with_and(matches))};
  }
  if (text.starts_with("MIG-")) return Stop{fmt::format("no MIG instance has a UUID starting with \"{}\"", text)};
  if (text.starts_with("GPU-")) return Stop{fmt::format("no GPU has a UUID starting with \"{}\"", text)};
  return Stop{fmt::format("\"{}\" is neither a GPU index nor the start of a GPU UUID", text)};
}

bool looks_like_index(std::string_view text) {
  const std::string_view digits = text.starts_with('-') ? text.substr(1) : text;
  return !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

Match match_entry(std::string_view text, const std::vector<std::string>& uuids) {
  if (text.empty()) return Stop{"an empty entry ends the list"};
  if (looks_like_index(text)) return match_index(text, uuids.size());
  if (text.starts_with("GPU-") || text.starts_with("MIG-")) return match_uuid_prefix(text, text, uuids);
  // The driver also takes a UUID without its "GPU-" tag.
  return match_uuid_prefix(text, fmt::format("GPU-{}", text), uuids);
}

std::vector<std::string_view> split_on_commas(std::string_view text) {
  std::vector<std::string_view> parts;
  while (true) {
    const auto comma = text.find(',');
    parts.push_back(text.substr(0, comma));
    if (comma == std::string_view::npos) return parts;
    text.remove_prefix(comma + 1);
  }
}

}  // namespace

Visibility resolve_visibility(std::optional<std::string_view> value, const std::vector<std::string>& device_uuids) {
  Visibility visibility;
  if (!value) {
    for (std::size_t i = 0; i < device_uuids.size(); ++i) visibility.selected.push_back(static_cast<int>(i));
    return visibility;
  }
  visibility.set = true;
  if (value->empty()) return visibility;  // set but empty: CUDA shows no GPU at all

  bool stopped = false;
  for (std::string_view part : split_on_commas(*value)) {
    Visibility::Entry entry;
    entry.text = std::string(trim_blanks(part));
    if (stopped) {
      entry.why = std::string(kIgnored);
    } else {
      Match match = match_entry(entry.text, device_uuids);
      if (const int* index = std::get_if<int>(&match);
          index != nullptr && std::find(visibility.selected.begin(), visibility.selected.end(), *index) !=
                                  visibility.selected.end()) {
        match = Stop{fmt::format("GPU {} is already listed", *index)};
      }
      if (const int* index = std::get_if<int>(&match)) {
        entry.used = true;
        entry.why = fmt::format("GPU {}", *index);
        visibility.selected.push_back(*index);
      } else {
        stopped = true;
        entry.why = fmt::format("{}{}", kStopsPrefix, std::get<Stop>(match).reason);
      }
    }
    visibility.entries.push_back(std::move(entry));
  }
  return visibility;
}

// Leaves out the variable's name and value: callers print `NAME="value": ` before it.
std::string Visibility::summary() const {
  if (!set) {
    return fmt::format("not set: every GPU is used ({})", selected.empty() ? "none found" : join_with_and(selected));
  }
  std::string text =
      selected.empty() ? "uses no GPU"
                       : fmt::format("uses GPU{} {}", selected.size() == 1 ? "" : "s", join_with_and(selected));
  if (entries.empty()) return text + " (the list is empty)";

  const auto stop = std::find_if(entries.begin(), entries.end(), [](const Entry& entry) {
    return std::string_view(entry.why).starts_with(kStopsPrefix);
  });
  if (stop == entries.end()) return text;
  text += fmt::format("; the list stops at \"{}\" ({})", stop->text, stop->why.substr(kStopsPrefix.size()));
  const auto ignored = static_cast<std::size_t>(entries.end() - stop - 1);
  if (ignored > 0) text += fmt::format("; {} later entr{} ignored", ignored, ignored == 1 ? "y is" : "ies are");
  return text;
}

}  // namespace plimsoll
