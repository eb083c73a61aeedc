#pragma once
// Numeric option values checked by plimsoll rather than by CLI11, so that a bad value's message names the option,
// the value and the fix (CLI11's range message names only the problem): `plimsoll::parse_count` for whole numbers,
// `parse_number` here for the real-valued ones (seconds, factors). Either throws plimsoll::InvalidArgument, which
// the CLI reports as bad input (exit status 2). `for_option` gives the library's own parsers' messages (sizes,
// policies, device names) the option's name the same way.
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "plimsoll/error.hpp"

namespace plimsoll::cli {

/// The values an option accepts: from `minimum` (itself excluded when `minimum_excluded`) up to `maximum`, if any
/// (itself excluded when `maximum_excluded`).
struct NumberRange {
  double minimum = 0;
  bool minimum_excluded = false;
  std::optional<double> maximum;
  bool maximum_excluded = false;
};

/// Parses `text`, given for the option `option` (such as "--interval"), as a finite number within `range`. Throws
/// InvalidArgument for empty, non-numeric, infinite or out-of-range text: `--interval 0 is too small; give
/// --interval a number from 0.05 to 3600`.
double parse_number(std::string_view text, std::string_view option, const NumberRange& range);

/// Runs `parse` (a library parser: parse_size, parse_growth, DeviceName::parse, ...) on the value of `option`, and
/// puts the option in front of the InvalidArgument it throws: the library's message names the value and the form
/// it takes, and the user also learns which option to change: `--memory-limit: invalid size "abc": ...`.
template <typename Parse>
auto for_option(std::string_view option, Parse&& parse) -> decltype(std::forward<Parse>(parse)()) {
  try {
    return std::forward<Parse>(parse)();
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(std::string(option) + ": " + error.what());
  }
}

}  // namespace plimsoll::cli
