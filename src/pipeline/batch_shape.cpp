// Sample shapes ("224x224x3") and the whole-number options of the estimator, parsed strictly: a typo must be an
// error that names it, not a silently different estimate.
#include <charconv>
#include <cstddef>
#include <string>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/estimate.hpp"
#include "util/checked_math.hpp"

namespace plimsoll {
namespace {

constexpr std::string_view kShapeForm =
    "write the shape of one sample as whole numbers of at least 1 joined by 'x', e.g. 224x224x3";

[[noreturn]] void reject_shape(std::string_view text, std::string_view problem) {
  throw InvalidArgument(fmt::format("invalid shape \"{}\": {}; {}", text, problem, kShapeForm));
}

bool all_digits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// Digits only (no sign, blank or fraction) into a uint64; false when out of range.
bool parse_digits(std::string_view digits, std::uint64_t& value) {
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  return error == std::errc() && end == digits.data() + digits.size();
}

}  // namespace

std::uint64_t BatchShape::elements() const {
  std::uint64_t product = 1;
  for (std::uint64_t dim : dims) {
    const auto next = util::checked_multiply(product, dim);
    if (!next) {
      throw InvalidArgument(fmt::format("shape {} has 2^64 elements or more; check the dimensions", to_string()));
    }
    product = *next;
  }
  return product;
}

std::string BatchShape::to_string() const {
  std::string text;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i != 0) text += 'x';
    text += fmt::format("{}", dims[i]);
  }
  return text;
}

BatchShape parse_shape(std::string_view text) {
  if (text.empty()) reject_shape(text, "it is empty");
  BatchShape shape;
  std::size_t start = 0;
  while (true) {
    const std::size_t separator = text.find('x', start);
    const std::string_view part =
        text.substr(start, separator == std::string_view::npos ? std::string_view::npos : separator - start);
    const std::size_t position = shape.dims.size() + 1;
    if (part.empty()) reject_shape(text, fmt::format("dimension {} is missing", position));
    if (part.front() == '-') reject_shape(text, fmt::format("dimension {} ({}) is negative", position, part));
    if (!all_digits(part)) {
      reject_shape(text, fmt::format("dimension {} (\"{}\") is not a whole number", position, part));
    }
    std::uint64_t dim = 0;
    if (!parse_digits(part, dim)) reject_shape(text, fmt::format("dimension {} ({}) is 2^64 or more", position, part));
    if (dim == 0) reject_shape(text, fmt::format("dimension {} is 0", position));
    shape.dims.push_back(dim);
    if (separator == std::string_view::npos) break;
    start = separator + 1;
  }
  shape.elements();  // throws for a product of 2^64 or more, which no batch could hold
  return shape;
}

std::uint64_t parse_count(std::string_view text, std::string_view name, std::uint64_t minimum) {
  const std::string fix = fmt::format("give {} a whole number of at least {}", name, minimum);
  if (text.empty()) throw InvalidArgument(fmt::format("{} is empty; {}", name, fix));
  if (text.front() == '-') throw InvalidArgument(fmt::format("{} {} is negative; {}", name, text, fix));
  if (!all_digits(text)) {
    throw InvalidArgument(fmt::format("{} \"{}\" is not a whole number; {}", name, text, fix));
  }
  std::uint64_t value = 0;
  if (!parse_digits(text, value)) {
    throw InvalidArgument(fmt::format("{} {} is 2^64 or more; {}", name, text, fix));
  }
  if (value < minimum) throw InvalidArgument(fmt::format("{} {} is too small; {}", name, text, fix));
  return value;
}

}  // namespace plimsoll
