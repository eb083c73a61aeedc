#include "cli/option_values.hpp"

#include <charconv>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "plimsoll/error.hpp"

namespace plimsoll::cli {
namespace {

std::string accepted(std::string_view option, const NumberRange& range) {
  if (range.maximum && range.maximum_excluded) {
    return fmt::format("give {} a number {} {} and below {}", option, range.minimum_excluded ? "above" : "of at least",
                       range.minimum, *range.maximum);
  }
  if (range.maximum) {
    return fmt::format("give {} a number {} {} to {}", option, range.minimum_excluded ? "above" : "from",
                       range.minimum, *range.maximum);
  }
  return fmt::format("give {} a number {} {}", option, range.minimum_excluded ? "above" : "of at least",
                     range.minimum);
}

}  // namespace

double parse_number(std::string_view text, std::string_view option, const NumberRange& range) {
  const std::string fix = accepted(option, range);
  if (text.empty()) throw InvalidArgument(fmt::format("{} is empty; {}", option, fix));
  double value = 0;
  const char* const last = text.data() + text.size();
  // from_chars takes no leading '+', which a user may write.
  const char* const first = text.front() == '+' ? text.data() + 1 : text.data();
  const bool signs_twice = first != text.data() && first != last && (*first == '-' || *first == '+');  // "+-5"
  const auto [end, error] = std::from_chars(first, last, value);
  if (!signs_twice &&
      (error == std::errc::result_out_of_range || (error == std::errc{} && end == last && !std::isfinite(value))))
    throw InvalidArgument(fmt::format("{} {} is out of range; {}", option, text, fix));
  if (signs_twice || error != std::errc{} || end != last)
    throw InvalidArgument(fmt::format("{} \"{}\" is not a number; {}", option, text, fix));
  if (value < range.minimum || (range.minimum_excluded && value == range.minimum))
    throw InvalidArgument(fmt::format("{} {} is too small; {}", option, text, fix));
  if (range.maximum && (value > *range.maximum || (range.maximum_excluded && value == *range.maximum)))
    throw InvalidArgument(fmt::format("{} {} is too large; {}", option, text, fix));
  return value;
}

}  // namespace plimsoll::cli
