// Environment variables over a Config: the last word, for jobs launched by schedulers and scripts.
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll {
namespace {

class Environment {
 public:
  explicit Environment(Getenv getenv_fn) : getenv_(getenv_fn) {}

  /// An empty variable counts as unset: `PLIMSOLL_MEMORY_LIMIT= cmd` is how shells clear one for a command.
  std::optional<std::string_view> get(const char* name) const {
    const char* value = getenv_(name);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string_view(value);
  }

  [[noreturn]] static void reject(const char* name, std::string_view value, std::string_view problem) {
    throw InvalidArgument(fmt::format("environment variable {}=\"{}\": {}", name, value, problem));
  }

  std::optional<bool> get_bool(const char* name) const {
    const auto value = get(name);
    if (!value) return std::nullopt;
    std::string lower(*value);
    for (char& c : lower) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    if (lower == "true" || lower == "1" || lower == "yes") return true;
    if (lower == "false" || lower == "0" || lower == "no") return false;
    reject(name, *value, "expected true, false, 1, 0, yes or no (case-insensitive)");
  }

  std::optional<std::uint64_t> get_size(const char* name) const {
    const auto value = get(name);
    if (!value) return std::nullopt;
    try {
      return parse_size(*value);
    } catch (const InvalidArgument& error) {
      reject(name, *value, error.what());
    }
  }

  std::optional<double> get_fraction(const char* name) const {
    const auto value = get(name);
    if (!value) return std::nullopt;
    double fraction = 0.0;
    const char* end = value->data() + value->size();
    const auto [stop, error] = std::from_chars(value->data(), end, fraction);
    // from_chars reads "nan" and "inf" too; the range test below refuses them.
    if (error != std::errc{} || stop != end || !(fraction > 0.0 && fraction <= 1.0)) {
      reject(name, *value, "must be a number in (0, 1], the share of the device's total memory, e.g. 0.9");
    }
    return fraction;
  }

 private:
  Getenv getenv_;
};

std::optional<Growth> growth_from(const Environment& env) {
  std::optional<Growth> from_allow;
  if (const auto allow = env.get_bool("PLIMSOLL_ALLOW_GROWTH")) {
    // TF_FORCE_GPU_ALLOW_GROWTH's meaning: true grows as needed, false takes the budget up front.
    from_allow = *allow ? Growth::on_demand : Growth::preallocate;
  }
  std::optional<Growth> named;
  if (const auto value = env.get("PLIMSOLL_GROWTH")) {
    try {
      named = parse_growth(*value);
    } catch (const InvalidArgument& error) {
      Environment::reject("PLIMSOLL_GROWTH", *value, error.what());
    }
  }
  if (from_allow && named && *from_allow != *named) {
    throw InvalidArgument(fmt::format(
        "environment variables disagree: PLIMSOLL_ALLOW_GROWTH=\"{}\" asks for {} but PLIMSOLL_GROWTH=\"{}\"; "
        "set only one of them",
        *env.get("PLIMSOLL_ALLOW_GROWTH"), to_string(*from_allow), *env.get("PLIMSOLL_GROWTH")));
  }
  return named ? named : from_allow;
}

}  // namespace

const char* process_environment(const char* name) { return std::getenv(name); }

Config apply_environment(Config base, Getenv getenv_fn) {
  if (getenv_fn == nullptr) {
    getenv_fn = [](const char* name) -> const char* { return std::getenv(name); };
  }
  const Environment env(getenv_fn);

  Config config = std::move(base);
  if (const auto path = env.get("PLIMSOLL_CONFIG")) config = load_config_file(std::string(*path));

  Policy& policy = config.default_policy;
  if (const auto growth = growth_from(env)) policy.growth = *growth;

  const auto limit = env.get_size("PLIMSOLL_MEMORY_LIMIT");
  const auto fraction = env.get_fraction("PLIMSOLL_MEMORY_FRACTION");
  if (limit && fraction) {
    throw InvalidArgument(fmt::format(
        "environment variables PLIMSOLL_MEMORY_LIMIT=\"{}\" and PLIMSOLL_MEMORY_FRACTION=\"{}\" are both set; set "
        "memory_limit or memory_fraction, not both: unset one of them",
        *env.get("PLIMSOLL_MEMORY_LIMIT"), *env.get("PLIMSOLL_MEMORY_FRACTION")));
  }
  // Either one replaces whichever of the two the config had: the environment is the last word.
  if (limit) {
    if (*limit == 0) {
      Environment::reject("PLIMSOLL_MEMORY_LIMIT", *env.get("PLIMSOLL_MEMORY_LIMIT"),
                          "memory_limit must be more than 0 bytes; give a size such as 8GiB, or unset it");
    }
    policy.memory_limit = limit;
    policy.memory_fraction.reset();
  }
  if (fraction) {
    policy.memory_fraction = fraction;
    policy.memory_limit.reset();
  }
  if (const auto reserve = env.get_size("PLIMSOLL_RESERVE")) policy.reserve = reserve;
  if (const auto threshold = env.get_size("PLIMSOLL_RELEASE_THRESHOLD")) policy.release_threshold = threshold;
  if (const auto cache = env.get_size("PLIMSOLL_THREAD_CACHE")) policy.thread_cache = cache;
  // Read when a device is made (the file's own errors name it then); empty: none, as unset.
  if (const auto plan = env.get("PLIMSOLL_RUN_PLAN"); plan && !plan->empty()) policy.run_plan = std::string(*plan);

  if (const auto fallback = env.get_bool("PLIMSOLL_CPU_FALLBACK")) config.cpu_fallback = *fallback;
  if (const auto visible = env.get("PLIMSOLL_VISIBLE_DEVICES")) config.visible_devices = std::string(*visible);
  // Parsed by the runtime when a GPU device is created (the sharing layer owns the form and its errors).
  if (const auto shares = env.get("PLIMSOLL_SHARE")) config.gpu_shares = std::string(*shares);
  if (const auto log = env.get_bool("PLIMSOLL_LOG")) config.log_device_creation = *log;

  policy.validate();
  return config;
}

}  // namespace plimsoll
