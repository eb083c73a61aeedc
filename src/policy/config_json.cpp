// The JSON config file: its schema is in include/plimsoll/policy.hpp and docs/configuration.md.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "plimsoll/error.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, 5> kTopLevelKeys{"policy", "devices", "cpu_fallback", "visible_devices",
                                                        "log_device_creation"};
constexpr std::array<std::string_view, 7> kPolicyKeys{"growth",  "memory_limit",      "memory_fraction",
                                                      "reserve", "release_threshold", "thread_cache",
                                                      "run_plan"};
constexpr std::array<std::string_view, 8> kDeviceKeys{"growth",       "memory_limit",     "memory_fraction",
                                                      "reserve",      "release_threshold", "thread_cache",
                                                      "run_plan",     "logical_devices"};

/// Where a value sits in the document, so every error points at the exact key: "devices"."cuda:0"."reserve".
struct Where {
  std::string_view origin;
  std::string path;

  Where operator/(std::string_view key) const {
    return {origin, path.empty() ? fmt::format("\"{}\"", key) : fmt::format("{}.\"{}\"", path, key)};
  }
  Where operator[](std::size_t index) const { return {origin, fmt::format("{}[{}]", path, index)}; }

  [[noreturn]] void fail(std::string_view problem) const {
    if (path.empty()) throw InvalidArgument(fmt::format("config {}: {}", origin, problem));
    throw InvalidArgument(fmt::format("config {}: {}: {}", origin, path, problem));
  }
};

/// A value as it was written, shortened so a huge object cannot flood the message.
std::string describe(const json& value) {
  constexpr std::size_t kMaxChars = 60;
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

/// Unknown keys are errors: a misspelt "memroy_limit" silently ignored would leave the device unlimited.
void reject_unknown_keys(const json& object, std::span<const std::string_view> known, const Where& where) {
  for (const auto& item : object.items()) {
    const std::string& key = item.key();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string hint;
    for (std::string_view candidate : known) {
      if (edit_distance(key, candidate) <= 2) {
        hint = fmt::format(" (did you mean \"{}\"?)", candidate);
        break;
      }
    }
    where.fail(fmt::format("unknown key \"{}\"{}; the known keys here are {}", key, hint, fmt::join(known, ", ")));
  }
}

const json& require_object(const json& value, const Where& where, std::string_view example) {
  if (!value.is_object()) where.fail(fmt::format("must be a JSON object such as {}, got {}", example, describe(value)));
  return value;
}

bool read_bool(const json& value, const Where& where) {
  if (!value.is_boolean()) where.fail(fmt::format("must be true or false (without quotes), got {}", describe(value)));
  return value.get<bool>();
}

std::uint64_t read_size(const json& value, const Where& where) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_float()) {
    // 1e9 is a whole number of bytes too; above 2^53 a double no longer holds every whole number exactly.
    constexpr double kLargestExact = 9007199254740992.0;
    const double bytes = value.get<double>();
    if (bytes >= 0.0 && bytes <= kLargestExact && std::floor(bytes) == bytes) return static_cast<std::uint64_t>(bytes);
    if (bytes > kLargestExact) {
      where.fail(
          fmt::format("got {}, too large to be exact as a JSON number; write the size as a string such as "
                      "\"20TiB\"",
                      describe(value)));
    }
  }
  if (value.is_string()) {
    try {
      return parse_size(value.get_ref<const std::string&>());
    } catch (const InvalidArgument& error) {
      where.fail(error.what());
    }
  }
  where.fail(
      fmt::format("must be a size: a whole number of bytes or a string such as \"8GiB\", got {}", describe(value)));
}

std::uint64_t read_positive_size(const json& value, const Where& where) {
  const std::uint64_t bytes = read_size(value, where);
  if (bytes == 0)
    where.fail(fmt::format("must be more than 0 bytes, got {}; give a size such as \"8GiB\"", describe(value)));
  return bytes;
}

double read_fraction(const json& value, const Where& where) {
  const double fraction = value.is_number() ? value.get<double>() : 0.0;
  if (!value.is_number() || !(fraction > 0.0 && fraction <= 1.0)) {
    where.fail(fmt::format("must be a number in (0, 1], got {}", describe(value)));
  }
  return fraction;
}

Growth read_growth(const json& value, const Where& where) {
  if (!value.is_string()) {
    where.fail(fmt::format("must be \"preallocate\" or \"on_demand\", got {}", describe(value)));
  }
  try {
    return parse_growth(value.get_ref<const std::string&>());
  } catch (const InvalidArgument& error) {
    where.fail(error.what());
  }
}

/// Reads the policy keys present in `object` over `policy`. A limit replaces an inherited fraction and the other
/// way round: the entry that says more precisely what it wants wins. Returns whether any policy key was present.
bool read_policy_fields(const json& object, const Where& where, Policy& policy) {
  if (object.contains("memory_limit") && object.contains("memory_fraction")) {
    where.fail("set memory_limit or memory_fraction, not both; remove one of them");
  }
  bool any = false;
  for (const auto& item : object.items()) {
    const std::string& key = item.key();
    const json& value = item.value();
    const Where at = where / key;
    if (key == "growth") {
      policy.growth = read_growth(value, at);
    } else if (key == "memory_limit") {
      policy.memory_limit = read_positive_size(value, at);
      policy.memory_fraction.reset();
    } else if (key == "memory_fraction") {
      policy.memory_fraction = read_fraction(value, at);
      policy.memory_limit.reset();
    } else if (key == "reserve") {
      policy.reserve = read_size(value, at);
    } else if (key == "release_threshold") {
      policy.release_threshold = read_size(value, at);
    } else if (key == "thread_cache") {
      policy.thread_cache = read_size(value, at);
    } else if (key == "run_plan") {
      if (!value.is_string() || value.get<std::string>().empty())
        at.fail(fmt::format("a run plan is the path of a file from `plimsoll run-plan`, got {}; give a path such as "
                            "\"job.plan\"",
                            describe(value)));
      policy.run_plan = value.get<std::string>();
    } else {
      continue;
    }
    any = true;
  }
  try {
    policy.validate();
  } catch (const InvalidArgument& error) {
    where.fail(error.what());
  }
  return any;
}

// More logical devices than this on one physical device is a typo, not a plan (and a count this size would
// otherwise allocate a vector of it).
constexpr std::uint64_t kMaxLogicalDevices = 1024;

std::vector<LogicalDeviceConfig> read_logical_devices(const json& value, const Where& where) {
  // A count: that many equal shares of the physical device's budget.
  if (value.is_number_integer() || value.is_number_unsigned()) {
    if (value.is_number_integer() && value.get<std::int64_t>() < 1) {
      where.fail(fmt::format("a count of logical devices must be at least 1, got {}", describe(value)));
    }
    const auto count = value.get<std::uint64_t>();
    if (count > kMaxLogicalDevices) {
      where.fail(fmt::format("{} logical devices is more than the {} allowed; split the device into fewer", count,
                             kMaxLogicalDevices));
    }
    return std::vector<LogicalDeviceConfig>(count, LogicalDeviceConfig::equal());
  }
  if (!value.is_array() || value.empty()) {
    where.fail(fmt::format(
        "must be a non-empty list of memory limits such as [\"4GiB\", \"4GiB\"] (an entry may be \"equal\"), or a "
        "count of equal shares such as 2, got {}",
        describe(value)));
  }
  if (value.size() > kMaxLogicalDevices) {
    where.fail(fmt::format("{} logical devices is more than the {} allowed; split the device into fewer",
                           value.size(), kMaxLogicalDevices));
  }
  std::vector<LogicalDeviceConfig> split;
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (value[i].is_string() && value[i].get<std::string>() == "equal") {
      split.push_back(LogicalDeviceConfig::equal());
    } else {
      try {
        split.push_back(LogicalDeviceConfig::sized(read_positive_size(value[i], where[i])));
      } catch (const InvalidArgument& error) {
        throw InvalidArgument(fmt::format("{}; or \"equal\" for an equal share", error.what()));
      }
    }
  }
  return split;
}

void read_device_entry(const DeviceName& name, const json& entry, const Where& at, Config& config) {
  reject_unknown_keys(entry, kDeviceKeys, at);
  // An entry only says where this device differs from the policy above it: a logical device's from its physical
  // device's entry when there is one, every other device's from the document's "policy".
  Policy policy = config.default_policy;
  if (name.logical >= 0) {
    if (auto physical = config.device_policies.find(name.physical().str()); physical != config.device_policies.end()) {
      policy = physical->second;
    }
  }
  if (read_policy_fields(entry, at, policy)) config.device_policies[name.str()] = policy;

  if (entry.contains("logical_devices")) {
    if (name.logical >= 0) {
      at.fail(fmt::format("logical_devices splits a physical device; move it to \"{}\"", name.physical().str()));
    }
    config.logical_devices[name.str()] = read_logical_devices(entry.at("logical_devices"), at / "logical_devices");
  }
}

void read_devices(const json& devices, const Where& where, Config& config) {
  require_object(devices, where, R"({"cuda:0": {"memory_fraction": 0.9}})");
  struct Entry {
    DeviceName name;
    const json* value;
    Where at;
  };
  std::vector<Entry> entries;
  std::set<std::string> seen;
  for (const auto& item : devices.items()) {
    Where at = where / item.key();
    DeviceName name;
    try {
      name = DeviceName::parse(item.key());
    } catch (const InvalidArgument& error) {
      at.fail(error.what());
    }
    // "sim:16GiB" and "sim:17179869184" are one device: keys are stored as DeviceName::str() writes them.
    if (!seen.insert(name.str()).second) {
      at.fail(fmt::format("names the same device as another entry ({}); merge the two", name.str()));
    }
    require_object(item.value(), at, R"({"memory_fraction": 0.9})");
    entries.push_back({name, &item.value(), std::move(at)});
  }
  // Physical devices first, so their logical devices can start from them.
  std::stable_partition(entries.begin(), entries.end(), [](const Entry& entry) { return entry.name.logical < 0; });
  for (const Entry& entry : entries) read_device_entry(entry.name, *entry.value, entry.at, config);
}

/// nlohmann keeps the last of two equal keys without a word; a config with two "memory_limit"s is a mistake.
class DuplicateKeyCheck {
 public:
  explicit DuplicateKeyCheck(std::string_view origin) : origin_(origin) {}

  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        objects_.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!objects_.empty()) objects_.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (objects_.empty()) break;
        if (!objects_.back().keys.insert(key).second) {
          Where where{origin_, {}};
          for (std::size_t i = 0; i + 1 < objects_.size(); ++i) where = where / objects_[i].last_key;
          where.fail(fmt::format("the key \"{}\" appears twice in the same object; keep one", key));
        }
        objects_.back().last_key = key;
        break;
      }
      default:
        break;
    }
    return true;
  }

 private:
  struct Object {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::string_view origin_;
  std::vector<Object> objects_;
};

/// nlohmann reports a byte offset (1-based, of the last character read); people look for a line and column.
std::string line_and_column(std::string_view text, std::size_t byte) {
  const std::size_t position = std::min(byte == 0 ? 0 : byte - 1, text.size());
  const std::string_view before = text.substr(0, position);
  const auto line = 1 + std::count(before.begin(), before.end(), '\n');
  const std::size_t last_newline = before.rfind('\n');
  const std::size_t column = last_newline == std::string_view::npos ? position + 1 : position - last_newline;
  return fmt::format("line {}, column {}", line, column);
}

/// The part of nlohmann's message after its own "[json.exception...] parse error at ...: " prefix.
std::string_view syntax_problem(std::string_view what) {
  const std::size_t start = what.find("parse error");
  if (start == std::string_view::npos) return what;
  const std::size_t colon = what.find(": ", start);
  return colon == std::string_view::npos ? what : what.substr(colon + 2);
}

json parse_document(std::string_view text, std::string_view origin) {
  try {
    // Comments are allowed: a config file is read by people, and "why this limit" belongs next to it.
    return json::parse(text.begin(), text.end(), DuplicateKeyCheck(origin), /*allow_exceptions=*/true,
                       /*ignore_comments=*/true);
  } catch (const json::parse_error& error) {
    throw InvalidArgument(fmt::format("config {}: invalid JSON at {}: {}; fix the syntax there", origin,
                                      line_and_column(text, error.byte), syntax_problem(error.what())));
  } catch (const json::exception& error) {
    // Numbers beyond a double's range ("1e400") land here, with no position to report.
    std::string_view what = error.what();
    if (const std::size_t prefix_end = what.find("] ");
        what.starts_with("[json.exception") && prefix_end != std::string_view::npos) {
      what.remove_prefix(prefix_end + 2);
    }
    throw InvalidArgument(fmt::format("config {}: invalid JSON: {}", origin, what));
  }
}

}  // namespace

Config parse_config_json(std::string_view text, std::string_view origin) {
  const json document = parse_document(text, origin);
  const Where top{origin, {}};
  require_object(document, top, R"({"policy": {"memory_fraction": 0.9}})");
  reject_unknown_keys(document, kTopLevelKeys, top);

  Config config;
  // "policy" first, whatever the order in the file: device entries start from it.
  if (const auto policy = document.find("policy"); policy != document.end()) {
    const Where at = top / "policy";
    require_object(*policy, at, R"({"growth": "on_demand", "memory_limit": "8GiB"})");
    reject_unknown_keys(*policy, kPolicyKeys, at);
    read_policy_fields(*policy, at, config.default_policy);
  }
  if (const auto devices = document.find("devices"); devices != document.end()) {
    read_devices(*devices, top / "devices", config);
  }
  if (const auto fallback = document.find("cpu_fallback"); fallback != document.end()) {
    config.cpu_fallback = read_bool(*fallback, top / "cpu_fallback");
  }
  if (const auto visible = document.find("visible_devices"); visible != document.end()) {
    if (!visible->is_string()) {
      (top / "visible_devices")
          .fail(
              fmt::format("must be a string in CUDA_VISIBLE_DEVICES form such as \"0,1\", got {}", describe(*visible)));
    }
    config.visible_devices = visible->get<std::string>();
  }
  if (const auto log = document.find("log_device_creation"); log != document.end()) {
    config.log_device_creation = read_bool(*log, top / "log_device_creation");
  }
  return config;
}

Config load_config_file(const std::string& path) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  const auto cannot_read = [&path](int error) {
    return InvalidArgument(
        fmt::format("cannot read config file {}: {}; check the path (PLIMSOLL_CONFIG or the path "
                    "given) and that the file is readable",
                    path, std::strerror(error)));
  };
  if (!file) throw cannot_read(errno);
  std::string text;
  std::array<char, 4096> buffer{};
  std::size_t count = 0;
  do {
    count = std::fread(buffer.data(), 1, buffer.size(), file.get());
    text.append(buffer.data(), count);
  } while (count == buffer.size());
  const int read_error = errno;
  if (std::ferror(file.get())) throw cannot_read(read_error);  // a directory opens, then fails here with EISDIR
  return parse_config_json(text, path);
}

}  // namespace plimsoll
