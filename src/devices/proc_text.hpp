#pragma once
// Reading the kernel's small text files: /proc/meminfo, /proc/self/cgroup, cgroup controls.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace plimsoll {

/// The file's text, or nothing when it cannot be opened. Reads to the end rather than trusting the size,
/// which /proc and /sys report as 0 or 4096.
std::optional<std::string> read_text_file(const std::filesystem::path& path);

/// `text` without leading and trailing blanks, tabs and line ends.
std::string_view trim_blanks(std::string_view text);

/// A non-empty run of decimal digits that fits 64 bits; nothing for anything else (signs and blanks included).
std::optional<std::uint64_t> parse_decimal(std::string_view digits);

}  // namespace plimsoll
