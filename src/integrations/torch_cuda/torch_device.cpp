#include "integrations/torch_cuda/torch_device.hpp"

#include <exception>
#include <new>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/stats.hpp"

namespace plimsoll::torch_cuda {

namespace {
/// Inside a catch handler: the exception's message into `why` (`unknown` for one that is not a std::exception).
/// Never throws: these functions are noexcept, and a bad_alloc copying the message (out of host memory is often
/// what failed) would end the process. When even the copy fails, `why` is left empty (clear() neither allocates
/// nor throws), never with an earlier call's reason; the caller then says a fixed message (torch_cuda.cpp).
void keep_reason(std::string& why, const char* unknown) noexcept {
  try {
    throw;
  } catch (const std::exception& error) {
    try {
      why = error.what();
      return;
    } catch (...) {
    }
  } catch (...) {
    try {
      why = unknown;
      return;
    } catch (...) {
    }
  }
  why.clear();
}
}  // namespace

void* torch_malloc(Allocator& allocator, std::size_t bytes, void* stream, std::string& why) noexcept {
  try {
    // allocate() (not try_allocate) so that plimsoll's full report (what is held, by whom, the fix) is kept. It
    // waits for parked frees before it gives up.
    return allocator.allocate(bytes, Stream{stream});
  } catch (...) {
    keep_reason(why, "allocation failed with an unknown exception");
  }
  return nullptr;
}

bool torch_free(Allocator& allocator, void* ptr, void* stream, std::string& why) noexcept {
  try {
    allocator.deallocate(ptr, Stream{stream});
    return true;
  } catch (...) {
    keep_reason(why, "free failed with an unknown exception");
  }
  return false;
}

bool torch_record_stream(Allocator& allocator, void* ptr, void* stream, std::string& why) noexcept {
  try {
    allocator.record_stream(ptr, Stream{stream});
    return true;
  } catch (const std::bad_alloc&) {
    try {
      why = "record_stream: out of host memory; the block's streams are as before (synchronize the stream before "
            "freeing it)";
    } catch (...) {
      why.clear();
    }
  } catch (...) {
    keep_reason(why, "record_stream failed with an unknown exception");
  }
  return false;
}

std::string stats_json(const Allocator& allocator, int device) {
  const Stats s = allocator.stats();
  return fmt::format(
      "{{\"device\":\"cuda:{}\",\"in_use_bytes\":{},\"peak_in_use_bytes\":{},\"reserved_bytes\":{},"
      "\"peak_reserved_bytes\":{},\"parked_bytes\":{},\"limit_bytes\":{},\"allocations\":{},\"frees\":{},"
      "\"ooms\":{},\"live_allocations\":{},\"maps\":{},\"unmaps\":{},\"stream_fallbacks\":{},\"unrecorded_streams\":{},"
      "\"allocated_bytes.all.current\":{},\"allocated_bytes.all.peak\":{},\"allocation.all.allocated\":{},"
      "\"reserved_bytes.all.current\":{},\"reserved_bytes.all.peak\":{},\"active_bytes.all.current\":{},"
      "\"requested_bytes.all.current\":{},\"allocation.all.current\":{},\"num_ooms\":{}}}",
      device, s.in_use_bytes, s.peak_in_use_bytes, s.reserved_bytes, s.peak_reserved_bytes, s.parked_bytes,
      s.limit_bytes, s.allocations, s.frees, s.ooms, s.live_allocations, s.maps, s.unmaps, s.stream_fallbacks,
      s.unrecorded_streams, s.in_use_bytes,
      s.peak_in_use_bytes, s.allocations, s.reserved_bytes, s.peak_reserved_bytes, s.in_use_bytes + s.parked_bytes,
      s.requested_bytes, s.live_allocations, s.ooms);
}

std::uint64_t empty_cache(Allocator& allocator) { return allocator.trim(); }

long long pause(Allocator& allocator, bool keep_contents, std::string& why) noexcept {
  try {
    return static_cast<long long>(allocator.pause(PauseOptions{.keep_contents = keep_contents}));
  } catch (...) {
    keep_reason(why, "pause failed with an unknown exception");
  }
  return -1;
}

bool resume(Allocator& allocator, std::string& why) noexcept {
  try {
    allocator.resume();
    return true;
  } catch (...) {
    keep_reason(why, "resume failed with an unknown exception");
  }
  return false;
}

}  // namespace plimsoll::torch_cuda
