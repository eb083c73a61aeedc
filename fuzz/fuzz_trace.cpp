// libFuzzer target: parse_trace on arbitrary bytes. It must either return a trace whose invariants hold or throw
// InvalidArgument; anything else (a crash, a sanitizer report, another exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "plimsoll/error.hpp"
#include "plimsoll/trace.hpp"

namespace {

// What every parsed trace promises its users (replay indexes vectors by slot without checking).
void check_invariants(const plimsoll::Trace& trace) {
  std::size_t allocations = 0;
  std::size_t frees = 0;
  for (const plimsoll::TraceEvent& event : trace.events) {
    switch (event.kind) {
      case plimsoll::TraceEvent::Kind::allocate:
        if (event.slot != allocations) std::abort();  // slots are allocation ordinals
        ++allocations;
        break;
      case plimsoll::TraceEvent::Kind::free:
        if (event.slot >= allocations) std::abort();
        ++frees;
        break;
      case plimsoll::TraceEvent::Kind::marker:
        if (event.slot >= trace.markers.size()) std::abort();
        break;
    }
  }
  if (allocations != trace.allocations || frees != trace.frees || trace.slots != allocations) std::abort();
  for (const plimsoll::TraceStep& step : trace.steps) {
    if (step.begin == 0 || step.begin > step.end || step.end >= trace.events.size()) std::abort();
    if (trace.events[step.end].kind != plimsoll::TraceEvent::Kind::marker) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);  // NOLINT: bytes seen as text
  try {
    check_invariants(plimsoll::parse_trace(text, "fuzz"));
  } catch (const plimsoll::InvalidArgument&) {
    // Rejected input is the expected outcome for most mutations.
  }
  return 0;
}
