#pragma once
// The memory ceiling cgroup v2 puts on this process: the smallest memory.max from its cgroup up to the root,
// because a parent's limit binds every child even when the child's own file says "max".
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace plimsoll::cgroup {

/// The v2 cgroup path from /proc/self/cgroup text: the "0::/some/path" line gives "/some/path".
/// Absent on hosts that only mount cgroup v1.
std::optional<std::string> v2_path(std::string_view proc_self_cgroup);

/// memory.max text: a byte count, or "max" for no limit (absent). Throws InvalidArgument for anything else.
std::optional<std::uint64_t> parse_memory_max(std::string_view text);

/// The smallest memory.max among `cgroup_path` and its ancestors under `mount` (normally /sys/fs/cgroup).
/// Missing or unreadable files are skipped: not every level has one (the root never does).
std::optional<std::uint64_t> memory_limit(const std::filesystem::path& mount, std::string_view cgroup_path);

}  // namespace plimsoll::cgroup
