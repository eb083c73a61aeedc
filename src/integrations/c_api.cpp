// The C ABI over Runtime::global(). Each entry point checks its pointers, then runs under guarded(), so
// callers in any language get a status code and a message, never an exception or a crash.
#include "plimsoll/plimsoll.h"

#include <charconv>
#include <cstdlib>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "integrations/c_api_guard.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll::c_api {

std::string& last_error() {
  thread_local std::string message;
  return message;
}

namespace {

template <typename T>
T& required(T* pointer, const char* function, const char* argument, const char* fix) {
  if (pointer == nullptr) {
    throw InvalidArgument(fmt::format("{}: {} is NULL; {}", function, argument, fix));
  }
  return *pointer;
}

constexpr const char* kDeviceFix = "pass the device plimsoll_get_device gave";

Allocator& allocator_of(plimsoll_device* device, const char* function) {
  return *reinterpret_cast<Allocator*>(&required(device, function, "device", kDeviceFix));
}

double parse_fraction(std::string_view text) {
  double value = 0.0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) {
    throw InvalidArgument(fmt::format(
        "invalid memory_fraction \"{}\": expected a number in (0, 1], e.g. 0.5 for half of the device", text));
  }
  return value;
}

void apply_setting(Policy& policy, std::string_view key, std::string_view value) {
  if (key == "growth") {
    policy.growth = parse_growth(value);
  } else if (key == "memory_limit") {
    // The newest setting wins: a limit replaces a fraction set earlier (the two cannot be combined).
    policy.memory_limit = parse_size(value);
    policy.memory_fraction.reset();
  } else if (key == "memory_fraction") {
    policy.memory_fraction = parse_fraction(value);
    policy.memory_limit.reset();
  } else if (key == "reserve") {
    policy.reserve = parse_size(value);
  } else if (key == "release_threshold") {
    policy.release_threshold = parse_size(value);
  } else if (key == "thread_cache") {
    policy.thread_cache = parse_size(value);
  } else {
    throw InvalidArgument(fmt::format(
        "plimsoll_configure: unknown key \"{}\"; use one of: growth, memory_limit, memory_fraction, reserve, "
        "release_threshold, thread_cache",
        key));
  }
}

const TagStats* find_tag(const Stats& stats, std::string_view tag) {
  for (const TagStats& entry : stats.tags) {
    if (entry.tag == tag) return &entry;
  }
  return nullptr;
}

// The environment over an explicitly loaded file, except PLIMSOLL_CONFIG: the file given is the one wanted.
const char* getenv_except_config_path(const char* variable) {
  if (std::string_view(variable) == "PLIMSOLL_CONFIG") return nullptr;
  return std::getenv(variable);
}

}  // namespace
}  // namespace plimsoll::c_api

using plimsoll::c_api::allocator_of;
using plimsoll::c_api::guarded;
using plimsoll::c_api::required;

extern "C" {

const char* plimsoll_last_error(void) { return plimsoll::c_api::last_error().c_str(); }

plimsoll_status plimsoll_configure(const char* device, const char* key, const char* value) {
  return guarded([&] {
    const char* function = "plimsoll_configure";
    required(device, function, "device", "name a device, e.g. \"cuda:0\"");
    required(key, function, "key", "use one of: growth, memory_limit, memory_fraction, reserve, release_threshold, "
             "thread_cache");
    required(value, function, "value", "give the setting's value, e.g. \"8GiB\"");
    plimsoll::Runtime& runtime = plimsoll::Runtime::global();
    plimsoll::Policy policy = runtime.policy_for(device);
    plimsoll::c_api::apply_setting(policy, key, value);
    runtime.configure(device, policy);
  });
}

plimsoll_status plimsoll_load_config(const char* path) {
  return guarded([&] {
    required(path, "plimsoll_load_config", "path", "pass the path of a JSON config file");
    // Environment variables still override the file, as they do for the config read at startup.
    plimsoll::Runtime::global().replace_config(
        plimsoll::apply_environment(plimsoll::load_config_file(path), plimsoll::c_api::getenv_except_config_path));
  });
}

plimsoll_status plimsoll_get_device(const char* name, plimsoll_device** out) {
  return guarded([&] {
    const char* function = "plimsoll_get_device";
    plimsoll_device*& result = required(out, function, "out", "pass the address of a plimsoll_device*");
    result = nullptr;
    required(name, function, "name", "name a device: \"cpu\", \"cuda:0\", \"sim:16GiB\", \"cpu/1\"");
    result = reinterpret_cast<plimsoll_device*>(&plimsoll::Runtime::global().device(std::string_view(name)));
  });
}

plimsoll_status plimsoll_allocate(plimsoll_device* device, size_t bytes, const char* tag, void** out) {
  return guarded([&] {
    const char* function = "plimsoll_allocate";
    void*& result = required(out, function, "out", "pass the address of a void*");
    result = nullptr;
    plimsoll::Allocator& allocator = allocator_of(device, function);
    // NULL tag: untagged, the same as calling without one from C++.
    result = tag == nullptr ? allocator.allocate(bytes) : allocator.allocate(bytes, std::string_view(tag));
  });
}

plimsoll_status plimsoll_free(plimsoll_device* device, void* ptr) {
  return guarded([&] {
    plimsoll::Allocator& allocator = allocator_of(device, "plimsoll_free");
    // Like free(NULL): cleanup code need not test its pointers first.
    if (ptr != nullptr) allocator.deallocate(ptr);
  });
}

plimsoll_status plimsoll_trim(plimsoll_device* device, uint64_t* released_bytes) {
  return guarded([&] {
    const std::uint64_t released = allocator_of(device, "plimsoll_trim").trim();
    if (released_bytes != nullptr) *released_bytes = released;
  });
}

plimsoll_status plimsoll_pause(plimsoll_device* device, int keep_contents, uint64_t* unmapped_bytes) {
  return guarded([&] {
    const std::uint64_t unmapped =
        allocator_of(device, "plimsoll_pause").pause(plimsoll::PauseOptions{.keep_contents = keep_contents != 0});
    if (unmapped_bytes != nullptr) *unmapped_bytes = unmapped;
  });
}

plimsoll_status plimsoll_resume(plimsoll_device* device) {
  return guarded([&] { allocator_of(device, "plimsoll_resume").resume(); });
}

plimsoll_status plimsoll_is_paused(plimsoll_device* device, int* paused) {
  return guarded([&] {
    int& result = required(paused, "plimsoll_is_paused", "paused", "pass the address of an int");
    result = allocator_of(device, "plimsoll_is_paused").paused() ? 1 : 0;
  });
}

plimsoll_status plimsoll_get_stats(plimsoll_device* device, plimsoll_stats* out) {
  return guarded([&] {
    const char* function = "plimsoll_get_stats";
    plimsoll_stats& result = required(out, function, "out", "pass the address of a plimsoll_stats");
    const plimsoll::Stats stats = allocator_of(device, function).stats();
    result.in_use_bytes = stats.in_use_bytes;
    result.peak_in_use_bytes = stats.peak_in_use_bytes;
    result.reserved_bytes = stats.reserved_bytes;
    result.peak_reserved_bytes = stats.peak_reserved_bytes;
    result.largest_free_block = stats.largest_free_block;
    result.limit_bytes = stats.limit_bytes;
    result.allocations = stats.allocations;
    result.frees = stats.frees;
    result.ooms = stats.ooms;
    result.maps = stats.maps;
    result.unmaps = stats.unmaps;
    result.live_allocations = stats.live_allocations;
    result.committed_bytes = stats.committed_bytes;
    result.resident_bytes = stats.resident_bytes;
    result.address_space_bytes = stats.address_space_bytes;
  });
}

plimsoll_status plimsoll_get_tag_stats(plimsoll_device* device, const char* tag, uint64_t* in_use, uint64_t* peak) {
  return guarded([&] {
    const char* function = "plimsoll_get_tag_stats";
    std::uint64_t& in_use_result = required(in_use, function, "in_use", "pass the address of a uint64_t");
    std::uint64_t& peak_result = required(peak, function, "peak", "pass the address of a uint64_t");
    required(tag, function, "tag", "name a tag given to plimsoll_allocate");
    plimsoll::Allocator& allocator = allocator_of(device, function);
    const plimsoll::Stats stats = allocator.stats();
    const plimsoll::TagStats* found = plimsoll::c_api::find_tag(stats, tag);
    if (found == nullptr) {
      std::string known;
      for (const plimsoll::TagStats& entry : stats.tags) known += (known.empty() ? "" : ", ") + entry.tag;
      throw plimsoll::InvalidArgument(fmt::format(
          "{}: tag \"{}\" has no allocations on {}; tags seen there: {}", function, tag,
          allocator.description().name, known.empty() ? "none" : known));
    }
    in_use_result = found->in_use_bytes;
    peak_result = found->peak_in_use_bytes;
  });
}

}  // extern "C"
