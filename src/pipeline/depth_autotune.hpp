#pragma once
// Autotune of the pipeline's depth: how many batch buffers it may own. It starts at 2 (one batch held by the
// consumer, one ahead) and adds one buffer after each window of deliveries in which the consumer waited more than
// 1% of its own step time, until the bounds stop it. A depth only grows, so memory never oscillates. When the
// workers spent under 1% of the window waiting for a buffer, they are the bottleneck and a deeper queue cannot
// help: the depth stays and the report says to add workers.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace plimsoll::pipeline_detail {

class DepthAutotune {
 public:
  static constexpr std::size_t kStartDepth = 2;
  static constexpr std::size_t kWindow = 16;  ///< Deliveries per decision; the first window (filling) is skipped.
  static constexpr double kTargetWaitFraction = 0.01;

  DepthAutotune(std::size_t cap, std::size_t workers) : cap_(cap), workers_(workers) {}

  /// One delivery: how long next() waited, how long the consumer worked since the previous next(), and the
  /// workers' total wait for buffers so far. Returns the depth to use from now on.
  std::size_t observe(std::chrono::nanoseconds wait, std::chrono::nanoseconds step,
                      std::chrono::nanoseconds producer_wait_total, std::size_t depth);
  const std::string& report() const noexcept { return report_; }

 private:
  std::size_t cap_;
  std::size_t workers_;
  std::uint64_t deliveries_ = 0;
  std::chrono::nanoseconds window_wait_{0};
  std::chrono::nanoseconds window_step_{0};
  std::chrono::nanoseconds producer_wait_at_window_start_{0};
  std::string report_;
};

}  // namespace plimsoll::pipeline_detail
