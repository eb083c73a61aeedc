#include "devices/cgroup_limit.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "devices/proc_text.hpp"
#include "plimsoll/error.hpp"

namespace plimsoll::cgroup {

std::optional<std::string> v2_path(std::string_view proc_self_cgroup) {
  constexpr std::string_view kUnifiedPrefix = "0::";  // v2 is hierarchy 0 with no controller list
  while (!proc_self_cgroup.empty()) {
    const auto end = proc_self_cgroup.find('\n');
    const std::string_view line = proc_self_cgroup.substr(0, end);
    if (line.starts_with(kUnifiedPrefix)) {
      const std::string_view path = trim_blanks(line.substr(kUnifiedPrefix.size()));
      if (!path.empty()) return std::string(path);
    }
    if (end == std::string_view::npos) break;
    proc_self_cgroup.remove_prefix(end + 1);
  }
  return std::nullopt;
}

std::optional<std::uint64_t> parse_memory_max(std::string_view text) {
  const std::string_view value = trim_blanks(text);
  if (value == "max") return std::nullopt;
  if (const auto bytes = parse_decimal(value)) return bytes;
  throw InvalidArgument(fmt::format(
      "invalid cgroup memory.max \"{}\": expected a byte count or \"max\", the two forms the kernel writes", value));
}

std::optional<std::uint64_t> memory_limit(const std::filesystem::path& mount, std::string_view cgroup_path) {
  // The process's own cgroup and every ancestor down to the mount point, which is the namespace's root.
  std::vector<std::filesystem::path> levels{mount};
  for (const auto& part : std::filesystem::path(cgroup_path).relative_path()) {
    if (part.empty() || part == ".") continue;
    if (part == "..") break;  // a cgroup outside our namespace: only the levels seen so far are ours to read
    levels.push_back(levels.back() / part);
  }

  std::optional<std::uint64_t> tightest;
  for (const auto& level : levels) {
    const std::optional<std::string> text = read_text_file(level / "memory.max");
    if (!text) continue;
    try {
      if (const auto limit = parse_memory_max(*text)) tightest = std::min(tightest.value_or(*limit), *limit);
    } catch (const InvalidArgument&) {
      continue;  // the kernel writes only the two forms; a stranger file is not a limit we can honour
    }
  }
  return tightest;
}

}  // namespace plimsoll::cgroup
