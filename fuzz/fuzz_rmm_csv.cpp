// libFuzzer target: RMM's logging CSV (parse_rmm_csv) on arbitrary bytes. It must either return a trace whose invariants hold or
// throw InvalidArgument; anything else (a crash, a sanitizer report, another exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "plimsoll/error.hpp"
#include "telemetry/traces/trace_readers.hpp"
#include "trace_invariants.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);  // NOLINT: bytes seen as text
  try {
    plimsoll::fuzzing::check_trace_invariants(plimsoll::telemetry::parse_rmm_csv(text, "fuzz"), /*slots_are_ordinals=*/false);
  } catch (const plimsoll::InvalidArgument&) {
    // Rejected input is the expected outcome for most mutations.
  }
  return 0;
}
