#include "sharing/settings.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "devices/proc_text.hpp"
#include "plimsoll/size.hpp"

namespace plimsoll::sharing {
namespace {

// A value that does not parse falls back to the default, said once on stderr: the variables are read inside the
// governed process (the interposer, the shared backing), where there is no caller to throw to.
void say_ignored_once(std::atomic<bool>& said, const char* name, const char* text, const char* takes,
                      const char* instead) {
  if (said.exchange(true, std::memory_order_relaxed)) return;
  std::fprintf(stderr, "plimsoll: %s=\"%s\" is ignored: give %s (using %s)\n", name, text, takes, instead);
}

}  // namespace

std::chrono::milliseconds trim_wait() {
  const char* text = std::getenv("PLIMSOLL_SHARE_TRIM_WAIT_MS");
  if (text == nullptr) return std::chrono::milliseconds(200);
  const auto value = parse_decimal(trim_blanks(text));
  if (value && *value < 600000) return std::chrono::milliseconds(static_cast<long>(*value));
  static std::atomic<bool> said{false};
  say_ignored_once(said, "PLIMSOLL_SHARE_TRIM_WAIT_MS", text, "a whole number of milliseconds below 600000",
                   "200 ms");
  return std::chrono::milliseconds(200);
}

std::optional<std::uint64_t> context_bytes_override() {
  const char* text = std::getenv("PLIMSOLL_SHARE_CONTEXT_BYTES");
  if (text == nullptr || *text == '\0') return std::nullopt;
  try {
    return parse_size(text);
  } catch (...) {
    static std::atomic<bool> said{false};
    say_ignored_once(said, "PLIMSOLL_SHARE_CONTEXT_BYTES", text, "a size such as 512MiB", "the measured cost");
    return std::nullopt;
  }
}

}  // namespace plimsoll::sharing
