// CUDA_VISIBLE_DEVICES as the CUDA driver reads it. The driver never reports a bad entry: it silently drops it
// and everything after it, which is why every entry here carries a sentence saying what became of it.
//
// The rules below were measured against driver 580 (CUDA 13) on an H100, entry by entry, and agree with the
// model PyTorch keeps of the same variable:
//  - the first entry picks the kind of the whole list: UUIDs when it starts with "GPU-" or "MIG-", else indices;
//    an entry of the other kind ends the list;
//  - an index is read like C's strtoul: leading blanks skipped, a sign allowed, anything after the digits
//    ignored ("1gpu" is 1), and only the low 32 bits kept as a signed int; a negative index ends the list;
//  - a UUID entry is its tag then hex digits, dashes anywhere and any case; fewer than 32 digits is a prefix,
//    text after the 32nd is ignored, any other character before it makes the entry invalid;
//  - an entry that names no GPU ends the list; one that names a GPU already listed empties it: CUDA shows none.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <variant>

#include <fmt/format.h>

#include "plimsoll/device.hpp"

namespace plimsoll {
namespace {

constexpr std::string_view kStopsPrefix = "stops the list: ";
constexpr std::string_view kIgnored = "ignored: after the list stopped";
constexpr std::size_t kUuidHexDigits = 32;

/// Why an entry ends the list.
struct Stop {
  std::string reason;
};
/// A device index, with a note when the text does not plainly say that number.
struct Found {
  int index;
  std::string note;
};
using Match = std::variant<Found, Stop>;

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

bool is_uuid_entry(std::string_view text) { return text.starts_with("GPU-") || text.starts_with("MIG-"); }

bool is_c_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/// What strtoul(text, nullptr, 10) returns, cut to a 32-bit int as the driver stores it; nothing without digits.
std::optional<int> read_index_like_cuda(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size() && is_c_space(text[pos])) ++pos;
  bool negative = false;
  if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) negative = text[pos++] == '-';
  const std::size_t digits_start = pos;
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t value = 0;
  bool overflow = false;
  for (; pos < text.size() && text[pos] >= '0' && text[pos] <= '9'; ++pos) {
    const auto digit = static_cast<std::uint64_t>(text[pos] - '0');
    overflow = overflow || value > (kMax - digit) / 10;
    value = value * 10 + digit;
  }
  if (pos == digits_start) return std::nullopt;
  if (overflow) {
    value = kMax;  // strtoul saturates, sign or not
  } else if (negative) {
    value = 0 - value;  // and negates in unsigned arithmetic
  }
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(value));
}

Match match_index(std::string_view text, std::size_t device_count) {
  const std::optional<int> index = read_index_like_cuda(text);
  if (!index) {
    if (is_uuid_entry(text)) {
      return Stop{"a UUID in a list of indices ends it (the first entry sets the kind of the whole list)"};
    }
    return Stop{fmt::format("\"{}\" is not a GPU index", text)};
  }
  std::string_view trimmed = text;
  while (!trimmed.empty() && is_c_space(trimmed.front())) trimmed.remove_prefix(1);
  while (!trimmed.empty() && is_c_space(trimmed.back())) trimmed.remove_suffix(1);
  const bool plain = trimmed == std::to_string(*index);
  const std::string read_as = plain ? std::string() : fmt::format("CUDA reads \"{}\" as {}", text, *index);

  if (*index < 0) {
    return Stop{plain ? std::string("a negative index ends the list")
                      : fmt::format("{}, and a negative index ends the list", read_as)};
  }
  if (static_cast<std::size_t>(*index) >= device_count) {
    const std::string detail = plain ? std::string() : read_as + "; ";
    return Stop{fmt::format("no GPU {} ({}{})", *index, detail, describe_device_count(device_count))};
  }
  return Found{*index, read_as};
}

/// Lower-case hex digits of a device's UUID: its tag and dashes dropped.
std::string uuid_digits(std::string_view uuid) {
  if (is_uuid_entry(uuid)) uuid.remove_prefix(4);
  std::string digits;
  for (char c : uuid) {
    if (const int value = hex_value(c); value >= 0) digits += "0123456789abcdef"[value];
  }
  return digits;
}

Match match_uuid(std::string_view text, const std::vector<std::string>& uuids) {
  if (!is_uuid_entry(text)) {
    if (read_index_like_cuda(text)) {
      return Stop{"an index in a list of UUIDs ends it (the first entry sets the kind of the whole list)"};
    }
    return Stop{fmt::format("\"{}\" is not a UUID starting with GPU- or MIG-", text)};
  }
  std::string prefix;
  for (char c : text.substr(4)) {
    if (prefix.size() == kUuidHexDigits) break;  // the driver reads no further
    if (c == '-') continue;
    const int value = hex_value(c);
    if (value < 0) {
      return Stop{fmt::format("\"{}\" is not a UUID: only hex digits and dashes may follow \"{}\"", text,
                              text.substr(0, 4))};
    }
    prefix += "0123456789abcdef"[value];
  }
  if (prefix.empty()) return Stop{fmt::format("\"{}\" gives no UUID digits", text)};

  std::vector<int> matches;
  for (std::size_t i = 0; i < uuids.size(); ++i) {
    if (uuid_digits(uuids[i]).starts_with(prefix)) matches.push_back(static_cast<int>(i));
  }
  if (matches.empty()) return Stop{fmt::format("no GPU has a UUID starting with \"{}\"", text)};
  if (matches.size() > 1) {
    return Stop{fmt::format("\"{}\" matches GPUs {}; give more of the UUID", text, join_with_and(matches))};
  }
  return Found{matches.front(), ""};
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

  const std::vector<std::string_view> parts = split_on_commas(*value);
  const bool uuid_list = is_uuid_entry(parts.front());
  bool stopped = false;
  for (std::string_view part : parts) {
    Visibility::Entry entry;
    entry.text = std::string(part);
    if (stopped) {
      entry.why = std::string(kIgnored);
      visibility.entries.push_back(std::move(entry));
      continue;
    }
    const Match match = uuid_list ? match_uuid(part, device_uuids) : match_index(part, device_uuids.size());
    if (const Stop* stop = std::get_if<Stop>(&match)) {
      stopped = true;
      entry.why = fmt::format("{}{}", kStopsPrefix, stop->reason);
    } else if (const Found& found = std::get<Found>(match);
               std::find(visibility.selected.begin(), visibility.selected.end(), found.index) !=
               visibility.selected.end()) {
      // Unlike a bad entry, a repeat takes back what came before it too.
      stopped = true;
      entry.why = fmt::format("{}GPU {} is named twice, and a repeated GPU makes CUDA show no GPU at all",
                              kStopsPrefix, found.index);
      for (Visibility::Entry& earlier : visibility.entries) {
        earlier.used = false;
        earlier.why += ", dropped: a later entry repeats a GPU";
      }
      visibility.selected.clear();
    } else {
      entry.used = true;
      entry.why = found.note.empty() ? fmt::format("GPU {}", found.index)
                                     : fmt::format("GPU {} ({})", found.index, found.note);
      visibility.selected.push_back(found.index);
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
