#include "pipeline/depth_autotune.hpp"

#include <fmt/format.h>

namespace plimsoll::pipeline_detail {

std::size_t DepthAutotune::observe(std::chrono::nanoseconds wait, std::chrono::nanoseconds step,
                                   std::chrono::nanoseconds producer_wait_total, std::size_t depth) {
  ++deliveries_;
  if (deliveries_ <= kWindow) {
    report_ = fmt::format("depth {}: measuring", depth);
    producer_wait_at_window_start_ = producer_wait_total;
    return depth;
  }
  window_wait_ += wait;
  window_step_ += step;
  if (deliveries_ % kWindow != 0) return depth;
  const double fraction = window_step_.count() > 0
                              ? static_cast<double>(window_wait_.count()) / static_cast<double>(window_step_.count())
                              : (window_wait_.count() > 0 ? 1.0 : 0.0);
  const auto window_wall = window_wait_ + window_step_;
  window_wait_ = window_step_ = std::chrono::nanoseconds{0};
  const auto producer_wait = producer_wait_total - producer_wait_at_window_start_;
  producer_wait_at_window_start_ = producer_wait_total;
  const bool workers_waited_for_buffers =
      static_cast<double>(producer_wait.count()) >
      kTargetWaitFraction * static_cast<double>(window_wall.count()) * static_cast<double>(workers_);
  const double percent = fraction * 100.0;
  if (fraction <= kTargetWaitFraction) {
    report_ = fmt::format("depth {}: the consumer waited {:.2f}% of its step time (target below {:.0f}%)", depth,
                          percent, kTargetWaitFraction * 100.0);
    return depth;
  }
  if (!workers_waited_for_buffers) {
    report_ = fmt::format(
        "depth {}: the consumer waits {:.2f}% of its step time, but the workers hardly waited for a buffer, so a "
        "deeper queue would not help; add workers or make the stages faster",
        depth, percent);
    return depth;
  }
  if (depth >= cap_) {
    report_ = fmt::format(
        "depth {}: the consumer still waits {:.2f}% of its step time, but the bounds allow no deeper queue; "
        "raise max_bytes or max_batches, or add workers",
        depth, percent);
    return depth;
  }
  report_ = fmt::format("depth {}: grew from {} because the consumer waited {:.2f}% of its step time", depth + 1,
                        depth, percent);
  return depth + 1;
}

}  // namespace plimsoll::pipeline_detail
