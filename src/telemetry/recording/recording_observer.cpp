// How a Recording watches an Allocator: the engine's observer interface (engine/allocation_observer.hpp), each
// event appended to the trace under the device's id.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "engine/allocation_observer.hpp"
#include "telemetry/recording/recorder.hpp"

namespace plimsoll {
namespace {

class RecordingObserver final : public engine::AllocationObserver {
 public:
  RecordingObserver(std::shared_ptr<Recording> recording, Recording::Impl& writer, std::uint16_t device)
      : recording_(std::move(recording)), writer_(writer), device_(device) {}

  void allocated(std::uint64_t addr, std::uint64_t bytes, Tag tag, std::uint32_t site) override {
    writer_.allocate(device_, addr, bytes, tag, site);
  }
  void freed(std::uint64_t addr) override { writer_.free(device_, addr); }
  void mapped(std::uint64_t bytes) override { writer_.map(device_, bytes); }
  void unmapped(std::uint64_t bytes) override { writer_.unmap(device_, bytes); }
  void out_of_memory(std::uint64_t bytes, Tag tag, std::uint32_t site) override {
    writer_.oom(device_, bytes, tag, site);
  }
  bool wants_call_sites() const override { return writer_.capturing_call_sites(); }
  std::uint32_t capture_call_site() override { return writer_.capture_call_site(); }
  std::string describe_call_site(std::uint32_t site) override { return writer_.describe_call_site(site); }

 private:
  std::shared_ptr<Recording> recording_;  // keeps the writer alive while a device reports to it
  Recording::Impl& writer_;
  const std::uint16_t device_;
};

}  // namespace

std::shared_ptr<engine::AllocationObserver> Recording::observer_for(std::shared_ptr<Recording> recording,
                                                                    std::string_view device_name) {
  Impl& writer = *recording->impl_;
  const std::uint16_t device = writer.device_id(device_name);
  return std::make_shared<RecordingObserver>(std::move(recording), writer, device);
}

}  // namespace plimsoll
