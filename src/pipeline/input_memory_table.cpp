// The resolution x batch table of input memory that people otherwise work out by hand.
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/estimate.hpp"
#include "util/checked_math.hpp"

namespace plimsoll {
namespace {

// Common square input resolutions, from CIFAR-sized to high-resolution crops.
const std::vector<std::uint64_t> kResolutions{32, 64, 128, 224, 256, 512, 1024};
constexpr std::uint64_t kSmallestBatch = 32;
constexpr std::uint64_t kLargestBatch = 65536;

}  // namespace

InputMemoryTable input_memory_table(DType dtype, std::uint64_t channels) {
  if (channels == 0) throw InvalidArgument("0 channels: an image has at least one channel; give 1 or more");
  InputMemoryTable table;
  table.dtype = dtype;
  table.channels = channels;
  table.resolutions = kResolutions;
  for (std::uint64_t batch = kSmallestBatch; batch <= kLargestBatch; batch *= 2) table.batches.push_back(batch);

  for (std::uint64_t resolution : table.resolutions) {
    std::vector<std::uint64_t>& row = table.bytes.emplace_back();
    for (std::uint64_t batch : table.batches) {
      // Checked: the channel count comes from the user.
      auto bytes = util::checked_multiply(resolution * resolution, channels);
      if (bytes) bytes = util::checked_multiply(*bytes, batch);
      if (bytes) bytes = util::checked_multiply(*bytes, dtype_bytes(dtype));
      if (!bytes) {
        throw InvalidArgument(fmt::format("{} channels make a {}x{} batch of {} 2^64 bytes or more; give fewer "
                                          "channels",
                                          channels, resolution, resolution, batch));
      }
      row.push_back(*bytes);
    }
  }
  return table;
}

}  // namespace plimsoll
