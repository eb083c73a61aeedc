#pragma once
// What the engine needs of a device's streams to reuse memory in stream order (docs/engine.md, "CUDA backings
// and streams"): events recorded on a stream and polled. A CUDA backing provides it, since only the backing
// knows the driver; host and simulated backings have none, and the engine then ignores streams at no cost.
#include <string>

namespace plimsoll::backings {

using StreamHandle = void*;  // a CUstream; nullptr is the legacy default stream
using EventHandle = void*;   // a CUevent

enum class EventState { complete, pending, failed };

class StreamEvents {
 public:
  virtual ~StreamEvents() = default;

  /// A new event for ordering only (no timing); nullptr when the driver refuses.
  virtual EventHandle create_event() noexcept = 0;
  virtual void destroy_event(EventHandle event) noexcept = 0;
  /// Records `event` on `stream`: it completes once the work queued on the stream so far has. False when refused.
  virtual bool record(EventHandle event, StreamHandle stream) noexcept = 0;
  /// Never blocks. `failed` is a sticky device error: the event will never say complete.
  virtual EventState query(EventHandle event) noexcept = 0;
  /// Waits for all of the device's work: the fallback when no event can be recorded.
  virtual void synchronize_device() noexcept = 0;
  /// A block was freed without saying which streams used it: before its granule is unmapped, the device's
  /// whole work must be waited for (the next unmap does so). Stream-ordered frees never call this.
  virtual void note_unordered_free() noexcept = 0;
  /// The last driver failure ("cuEventRecord failed: ..."), or empty.
  virtual std::string last_error() const = 0;
};

}  // namespace plimsoll::backings
