#include "telemetry/terminal/progress_bar.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "telemetry/render/timeline_axis.hpp"

namespace plimsoll::telemetry {
namespace {

// Carriage return, then "erase to the end of the line": the bar redraws in place.
constexpr std::string_view kEraseLine = "\r\033[K";
constexpr std::size_t kMinBarCells = 10;
constexpr std::size_t kMaxBarCells = 40;
// " 100%  999k/999k events  999k/s  ETA 9:59:59": the widest the numbers get below 10 hours.
constexpr std::size_t kNumbersColumns = 44;

std::string duration_text(double seconds) {
  const auto whole = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  if (whole >= 3600) return fmt::format("{}:{:02}:{:02}", whole / 3600, whole / 60 % 60, whole % 60);
  return fmt::format("{}:{:02}", whole / 60, whole % 60);
}

// Three significant digits with k/M/G ("65.5k", "1.5M"): short enough that the line keeps one width.
std::string count_text(double count) {
  const std::vector<AxisUnit>& units = axis_units(AxisKind::events);
  std::size_t chosen = 0;
  // 999.5 and up would print as "1e+03" in the smaller unit.
  while (chosen + 1 < units.size() && count >= 999.5 * units[chosen].scale) ++chosen;
  return fmt::format("{:.3g}{}", count / units[chosen].scale, units[chosen].suffix);
}

}  // namespace

std::string progress_line(std::string_view label, std::size_t done, std::size_t total, double elapsed_s,
                          std::size_t width) {
  done = std::min(done, total);
  const double fraction = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
  const double rate = elapsed_s > 0 && done > 0 ? static_cast<double>(done) / elapsed_s : 0;
  const std::string rate_text = rate > 0 ? count_text(rate) + "/s" : "--/s";
  const std::string eta = rate > 0 ? duration_text(static_cast<double>(total - done) / rate) : "--:--";
  // Padded to a fixed width, so the bar and the label keep their length and place while the numbers change.
  const std::string numbers = fmt::format(
      "{:<{}}",
      fmt::format(" {:3.0f}%  {}/{} events  {}  ETA {}", std::floor(fraction * 100),
                  count_text(static_cast<double>(done)), count_text(static_cast<double>(total)), rate_text, eta),
      kNumbersColumns);
  // The label gets what it needs first, the bar the rest; on a narrow terminal the label is cut.
  const std::size_t room = width > numbers.size() + 1 ? width - numbers.size() - 1 : 0;
  const std::size_t label_room = room > kMinBarCells + 3 ? room - kMinBarCells - 3 : 0;
  const std::string shown_label(label.substr(0, label_room));
  const std::size_t after_label = shown_label.size() + 3;  // the blank and the brackets
  const std::size_t bar_cells = std::clamp<std::size_t>(room > after_label ? room - after_label : 0, kMinBarCells,
                                                        kMaxBarCells);
  const auto filled = static_cast<std::size_t>(std::floor(fraction * static_cast<double>(bar_cells)));
  std::string line = shown_label;
  if (!line.empty()) line += ' ';
  line += '[' + std::string(filled, '#') + std::string(bar_cells - filled, '.') + ']';
  return line + numbers;
}

ProgressBar::ProgressBar(std::string label, std::size_t total, Sink sink, Clock clock, Options options)
    : label_(std::move(label)),
      total_(total),
      sink_(std::move(sink)),
      clock_(std::move(clock)),
      options_(options),
      started_s_(clock_()) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(std::size_t done) {
  if (finished_) return;
  const double now = clock_();
  if (now - started_s_ < options_.first_draw_after_s) return;
  if (draws_ > 0 && now - last_draw_s_ < options_.redraw_every_s) return;
  last_draw_s_ = now;
  ++draws_;
  sink_(std::string(kEraseLine) + progress_line(label_, done, total_, now - started_s_, options_.width));
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (draws_ > 0) sink_(kEraseLine);
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::size_t stderr_columns(std::size_t fallback) {
  winsize size{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) != 0 || size.ws_col == 0) return fallback;
  return size.ws_col;
}

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

}  // namespace plimsoll::telemetry
