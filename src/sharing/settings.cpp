#include "sharing/settings.hpp"

#include <cstdlib>

#include "devices/proc_text.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll::sharing {

std::chrono::milliseconds trim_wait() {
  const char* text = std::getenv("PLIMSOLL_SHARE_TRIM_WAIT_MS");
  if (text == nullptr) return std::chrono::milliseconds(200);
  const auto value = parse_decimal(trim_blanks(text));
  return std::chrono::milliseconds(value && *value < 600000 ? static_cast<long>(*value) : 200);
}

std::optional<std::uint64_t> context_bytes_override() {
  const char* text = std::getenv("PLIMSOLL_SHARE_CONTEXT_BYTES");
  if (text == nullptr || *text == '\0') return std::nullopt;
  try {
    return parse_size(text);
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace plimsoll::sharing
