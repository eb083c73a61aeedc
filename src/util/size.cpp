#include "plimsoll/size.hpp"

#include <array>
#include <cstddef>
#include <limits>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "util/checked_math.hpp"

namespace plimsoll {
namespace {

constexpr std::uint64_t kMaxBytes = std::numeric_limits<std::uint64_t>::max();

struct Unit {
  std::string_view name;
  std::uint32_t base;  // 1000 or 1024; 1 for plain bytes
  int power;
};

// Spelled the way they are printed; matching ignores case.
constexpr std::array<Unit, 9> kUnits{{
    {"B", 1, 0},
    {"KiB", 1024, 1}, {"MiB", 1024, 2}, {"GiB", 1024, 3}, {"TiB", 1024, 4},
    {"KB", 1000, 1}, {"MB", 1000, 2}, {"GB", 1000, 3}, {"TB", 1000, 4},
}};

[[noreturn]] void reject(std::string_view text, std::string_view problem) {
  std::string message = fmt::format("invalid size \"{}\": ", text);
  if (!problem.empty()) message += fmt::format("{}; ", problem);
  message +=
      "expected a whole number of bytes or a number with a unit (KiB MiB GiB TiB = powers of 1024; "
      "KB MB GB TB = powers of 1000), e.g. 512, 16GiB, 1.5GB";
  throw InvalidArgument(message);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

char to_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (to_lower(a[i]) != to_lower(b[i])) return false;
  }
  return true;
}

std::optional<Unit> find_unit(std::string_view name) {
  for (const Unit& unit : kUnits) {
    if (equals_ignoring_case(unit.name, name)) return unit;
  }
  return std::nullopt;
}

// floor(0.<digits> * base^power), exact for any number of digits: multiplying the decimal fraction by
// `base` pushes a whole part out of the top, which is the next "digit" of the result in radix `base`.
// Floating point would round 0.1 GiB differently from one compiler flag to the next.
std::uint64_t whole_part_of_fraction(std::string_view digits, std::uint32_t base, int power) {
  std::vector<std::uint32_t> fraction;
  fraction.reserve(digits.size());
  for (char c : digits) fraction.push_back(static_cast<std::uint32_t>(c - '0'));
  std::uint64_t whole = 0;
  for (int step = 0; step < power; ++step) {
    std::uint32_t carry = 0;
    for (auto it = fraction.rbegin(); it != fraction.rend(); ++it) {
      const std::uint32_t product = *it * base + carry;
      *it = product % 10;
      carry = product / 10;
    }
    whole = whole * base + carry;  // < base^power <= 1024^4: cannot overflow
  }
  return whole;
}

}  // namespace

std::uint64_t parse_size(std::string_view text) {
  if (text.empty()) reject(text, "the text is empty");
  if (text.front() == '-') reject(text, "a size cannot be negative");

  std::size_t pos = 0;
  while (pos < text.size() && is_digit(text[pos])) ++pos;
  const std::string_view whole_digits = text.substr(0, pos);
  if (whole_digits.empty()) reject(text, "it does not start with a number");

  std::string_view fraction_digits;
  if (pos < text.size() && text[pos] == '.') {
    const std::size_t fraction_start = ++pos;
    while (pos < text.size() && is_digit(text[pos])) ++pos;
    fraction_digits = text.substr(fraction_start, pos - fraction_start);
    if (fraction_digits.empty()) reject(text, "a decimal point needs digits after it");
  }

  std::optional<Unit> unit;
  if (pos < text.size()) {
    std::string_view unit_text = text.substr(pos);
    if (unit_text.front() == ' ') unit_text.remove_prefix(1);
    if (unit_text.empty()) reject(text, "a blank must be followed by a unit");
    unit = find_unit(unit_text);
    if (!unit) reject(text, fmt::format("unknown unit \"{}\"", unit_text));
  }
  if (!fraction_digits.empty() && (!unit || unit->power == 0)) {
    reject(text, "a fraction of a byte is not a size; give a unit with a fraction (1.5KiB) or whole bytes");
  }

  std::uint64_t count = 0;
  for (char c : whole_digits) {
    const auto tens = util::checked_multiply(count, 10);
    const auto next = tens ? util::checked_add(*tens, static_cast<std::uint64_t>(c - '0')) : std::nullopt;
    if (!next) reject(text, fmt::format("larger than the largest size, {} bytes", kMaxBytes));
    count = *next;
  }
  if (!unit) return count;

  std::uint64_t multiplier = 1;
  for (int i = 0; i < unit->power; ++i) multiplier *= unit->base;
  const auto whole = util::checked_multiply(count, multiplier);
  const std::uint64_t fraction = whole_part_of_fraction(fraction_digits, unit->base, unit->power);
  const auto bytes = whole ? util::checked_add(*whole, fraction) : std::nullopt;
  if (!bytes) reject(text, fmt::format("larger than the largest size, {} bytes", kMaxBytes));
  return *bytes;
}

std::string format_size(std::uint64_t bytes) {
  constexpr std::array<std::string_view, 5> kNames{"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);

  std::size_t level = 1;
  std::uint64_t unit = 1024;
  while (level + 1 < kNames.size() && bytes / unit >= 1024) {
    unit *= 1024;
    ++level;
  }
  // Integer rounding to hundredths: doubles lose the low bits of sizes above 2^53.
  std::uint64_t whole = bytes / unit;
  std::uint64_t hundredths = ((bytes % unit) * 100 + unit / 2) / unit;
  if (hundredths == 100) {
    ++whole;
    hundredths = 0;
  }
  if (whole == 1024 && level + 1 < kNames.size()) {  // 1023.999 KiB reads better as 1.00 MiB
    whole = 1;
    ++level;
  }
  return fmt::format("{}.{:02} {}", whole, hundredths, kNames[level]);
}

}  // namespace plimsoll
