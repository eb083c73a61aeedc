#include <algorithm>
#include <limits>
#include <map>
#include <string>

#include <fmt/format.h>

#include "devices/cgroup_limit.hpp"
#include "devices/proc_text.hpp"
#include "plimsoll/device.hpp"
#include "plimsoll/error.hpp"
#include "util/checked_math.hpp"

namespace plimsoll {
namespace {

constexpr std::string_view kMeminfoFields[] = {"MemTotal", "MemAvailable", "MemFree", "Buffers", "Cached"};

/// The fields plimsoll reads, in bytes. Other lines are skipped unread: their format is not ours to judge.
std::map<std::string_view, std::uint64_t> read_meminfo_fields(std::string_view meminfo) {
  std::map<std::string_view, std::uint64_t> fields;
  while (!meminfo.empty()) {
    const auto end = meminfo.find('\n');
    const std::string_view line = meminfo.substr(0, end);
    meminfo.remove_prefix(end == std::string_view::npos ? meminfo.size() : end + 1);

    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const auto field = std::find(std::begin(kMeminfoFields), std::end(kMeminfoFields), line.substr(0, colon));
    if (field == std::end(kMeminfoFields) || fields.contains(*field)) continue;

    // "MemTotal:       16318412 kB": the kernel always counts these in KiB and calls them kB.
    std::string_view value = trim_blanks(line.substr(colon + 1));
    constexpr std::string_view kUnit = " kB";
    const bool has_unit = value.ends_with(kUnit);
    if (has_unit) value = trim_blanks(value.substr(0, value.size() - kUnit.size()));
    const std::optional<std::uint64_t> kib = parse_decimal(value);
    if (!has_unit || !kib || *kib > std::numeric_limits<std::uint64_t>::max() / 1024) {
      throw InvalidArgument(fmt::format(
          "malformed meminfo line \"{}\": expected \"{}: <number> kB\" as Linux writes it in /proc/meminfo",
          line, *field));
    }
    fields.emplace(*field, *kib * 1024);
  }
  return fields;
}

std::uint64_t saturating_sum(std::initializer_list<std::uint64_t> terms) {
  std::uint64_t sum = 0;
  for (std::uint64_t term : terms) {
    sum = util::saturating_add(sum, term);
  }
  return sum;
}

}  // namespace

std::uint64_t HostInfo::limit_bytes() const {
  return cgroup_limit_bytes ? std::min(total_ram_bytes, *cgroup_limit_bytes) : total_ram_bytes;
}

HostInfo parse_host_info(std::string_view meminfo, std::optional<std::string_view> cgroup_memory_max) {
  const auto fields = read_meminfo_fields(meminfo);
  const auto field = [&](std::string_view name) -> std::optional<std::uint64_t> {
    const auto found = fields.find(name);
    return found == fields.end() ? std::nullopt : std::optional(found->second);
  };

  HostInfo host;
  const auto total = field("MemTotal");
  if (!total) {
    throw InvalidArgument(
        "meminfo has no MemTotal line: expected the text of Linux's /proc/meminfo (\"MemTotal: <number> kB\")");
  }
  host.total_ram_bytes = *total;

  if (const auto available = field("MemAvailable")) {
    host.available_ram_bytes = *available;
  } else if (const auto free = field("MemFree")) {
    // Kernels before 3.14 have no MemAvailable; free plus reclaimable caches is what tools estimated then.
    const std::uint64_t reclaimable =
        saturating_sum({*free, field("Buffers").value_or(0), field("Cached").value_or(0)});
    host.available_ram_bytes = std::min(host.total_ram_bytes, reclaimable);
  } else {
    throw InvalidArgument(
        "meminfo has neither MemAvailable nor MemFree: expected the text of Linux's /proc/meminfo "
        "(\"MemAvailable: <number> kB\")");
  }

  if (cgroup_memory_max) host.cgroup_limit_bytes = cgroup::parse_memory_max(*cgroup_memory_max);
  return host;
}

HostInfo scan_host() {
  const std::optional<std::string> meminfo = read_text_file("/proc/meminfo");
  if (!meminfo) throw Error("cannot read /proc/meminfo: plimsoll needs Linux with /proc mounted to size host memory");
  HostInfo host = parse_host_info(*meminfo, std::nullopt);

  const std::optional<std::string> membership = read_text_file("/proc/self/cgroup");
  const std::optional<std::string> cgroup_path = membership ? cgroup::v2_path(*membership) : std::nullopt;
  if (cgroup_path) host.cgroup_limit_bytes = cgroup::memory_limit("/sys/fs/cgroup", *cgroup_path);
  return host;
}

}  // namespace plimsoll
