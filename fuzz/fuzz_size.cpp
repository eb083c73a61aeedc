// Fuzzes parse_size: anything it accepts must survive the round trips that callers rely on.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>

#include "plimsoll/error.hpp"
#include "plimsoll/size.hpp"

namespace {

void require(bool holds, const char* invariant, std::string_view input) {
  if (holds) return;
  std::fprintf(stderr, "invariant broken: %s\ninput: \"%.*s\"\n", invariant, static_cast<int>(input.size()),
               input.data());
  std::abort();
}

std::string upper(std::string_view text) {
  std::string result(text);
  for (char& c : result) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return result;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::uint64_t bytes = 0;
  try {
    bytes = plimsoll::parse_size(text);
  } catch (const plimsoll::InvalidArgument&) {
    return 0;  // rejecting is fine; any other exception or a crash is the bug being hunted
  }

  require(plimsoll::parse_size(std::to_string(bytes)) == bytes, "parse_size(to_string(n)) == n", text);
  require(plimsoll::parse_size(upper(text)) == bytes, "units ignore case", text);

  if (const auto blank = text.find(' '); blank != std::string_view::npos) {
    std::string joined(text);
    joined.erase(blank, 1);
    require(plimsoll::parse_size(joined) == bytes, "the blank before the unit changes nothing", text);
  }

  constexpr std::uint64_t kTiB = std::uint64_t{1} << 40;
  if (bytes <= std::numeric_limits<std::uint64_t>::max() - kTiB) {  // larger ones round up past the maximum
    const std::string formatted = plimsoll::format_size(bytes);
    const std::uint64_t back = plimsoll::parse_size(formatted);
    const std::uint64_t error = back > bytes ? back - bytes : bytes - back;
    require(error <= bytes / 200 + 1, "format_size parses back to within its rounding", text);
  }
  return 0;
}
