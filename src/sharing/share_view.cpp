#include "sharing/share_view.hpp"

#include <algorithm>

namespace plimsoll::sharing {

GpuMemoryView seen_under_share(GpuMemoryView driver, std::uint64_t cap, std::uint64_t headroom) {
  return GpuMemoryView{.free_bytes = std::min(driver.free_bytes, headroom),
                       .total_bytes = std::min(driver.total_bytes, cap)};
}

}  // namespace plimsoll::sharing
