#pragma once
// Byte sizes as people write them: "512", "16GiB", "1.5 GB", "64kib".
#include <cstdint>
#include <string>
#include <string_view>

namespace plimsoll {

/// Parses a size: bare bytes, or a number followed by KiB MiB GiB TiB (powers of 1024) or KB MB GB TB
/// (powers of 1000), units case-insensitive, optional blank between number and unit, fractions allowed
/// when a unit is given ("1.5GiB"). Throws InvalidArgument naming the accepted forms otherwise.
std::uint64_t parse_size(std::string_view text);

/// Formats bytes for people: "512 B", "1.50 KiB", "16.00 GiB".
std::string format_size(std::uint64_t bytes);

}  // namespace plimsoll
