// TrainProgress (train_progress.hpp).
#include "train/train_progress.hpp"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "telemetry/terminal/progress_bar.hpp"

namespace plimsoll::train {
namespace {
constexpr double kRedrawEveryS = 0.2;
constexpr std::size_t kBarWidth = 20;
}  // namespace

TrainProgress::TrainProgress(bool enabled, std::uint64_t epoch, std::uint64_t epochs, std::uint64_t batches)
    : enabled_(enabled && batches > 0),
      terminal_(telemetry::stderr_is_terminal()),
      epoch_(epoch),
      epochs_(epochs),
      batches_(batches),
      started_s_(telemetry::steady_seconds()) {}

TrainProgress::~TrainProgress() { finish(); }

std::string TrainProgress::line(std::uint64_t done, double mean_loss, double accuracy, double elapsed_s) const {
  const double fraction = static_cast<double>(done) / static_cast<double>(batches_);
  const auto filled = static_cast<std::size_t>(fraction * kBarWidth);
  std::string eta = "--";
  if (done > 0 && done < batches_) {
    const auto seconds = static_cast<long>(elapsed_s / fraction * (1 - fraction));
    eta = fmt::format("{}:{:02}", seconds / 60, seconds % 60);
  }
  return fmt::format("epoch {}/{} [{}{}] {}/{} batches  loss {:.3f}  acc {:.1f}%  ETA {}", epoch_, epochs_,
                     std::string(filled, '#'), std::string(kBarWidth - filled, '.'), done, batches_, mean_loss,
                     100 * accuracy, eta);
}

void TrainProgress::update(std::uint64_t done, double mean_loss, double accuracy) {
  if (!enabled_) return;
  const double now = telemetry::steady_seconds();
  if (terminal_) {
    if (now - last_draw_s_ < kRedrawEveryS && done < batches_) return;
    last_draw_s_ = now;
    const std::string text = line(done, mean_loss, accuracy, now - started_s_);
    // Pad over a longer previous line; the line never wraps on an 80-column terminal.
    fmt::print(stderr, "\r{}{}", text, std::string(drawn_width_ > text.size() ? drawn_width_ - text.size() : 0, ' '));
    drawn_width_ = std::max(drawn_width_, text.size());
    std::fflush(stderr);
    return;
  }
  // A log gets no carriage returns: a line at each quarter of the epoch.
  if (done * 4 < next_quarter_ * batches_) return;
  while (done * 4 >= next_quarter_ * batches_) ++next_quarter_;
  fmt::print(stderr, "{}\n", line(done, mean_loss, accuracy, now - started_s_));
}

void TrainProgress::finish() {
  if (!enabled_ || !terminal_ || drawn_width_ == 0) return;
  fmt::print(stderr, "\r{}\r", std::string(drawn_width_, ' '));
  std::fflush(stderr);
  drawn_width_ = 0;
}

}  // namespace plimsoll::train
