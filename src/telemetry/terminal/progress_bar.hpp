#pragma once
// A progress bar for long replays on a terminal: "label [#####.....]  42%  420k/1M events  1.2M/s  ETA 0:03".
// It draws nothing for the first moments (a short replay never flashes a bar), redraws at most every
// `redraw_every_s`, and erases itself when done, so the table printed after it starts on a clean line. Time and
// output are injected, so tests drive it without a terminal; the CLI decides whether stderr is one.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace plimsoll::telemetry {

/// One line of the bar, shorter than `width` columns (ASCII only, so bytes are columns) and of the same length
/// whatever the numbers, so redraws do not jitter. `elapsed_s` is the time since
/// the bar began; rate and ETA read "--" until some events are done.
std::string progress_line(std::string_view label, std::size_t done, std::size_t total, double elapsed_s,
                          std::size_t width);

class ProgressBar {
 public:
  using Clock = std::function<double()>;            // seconds, monotonic
  using Sink = std::function<void(std::string_view)>;  // receives the terminal text, control codes included

  struct Options {
    double first_draw_after_s = 0.3;
    double redraw_every_s = 0.1;
    std::size_t width = 80;  // columns of the terminal
  };

  ProgressBar(std::string label, std::size_t total, Sink sink, Clock clock, Options options);
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  /// Erases the bar if it is still drawn.
  ~ProgressBar();

  /// `done` events of `total`; redraws when the last draw is old enough.
  void update(std::size_t done);
  /// Erases the line if anything was drawn; later updates draw nothing.
  void finish();
  std::size_t draws() const noexcept { return draws_; }

 private:
  std::string label_;
  std::size_t total_;
  Sink sink_;
  Clock clock_;
  Options options_;
  double started_s_;
  double last_draw_s_ = 0;
  std::size_t draws_ = 0;
  bool finished_ = false;
};

/// Seconds on the steady clock.
double steady_seconds();
/// Columns of the terminal on standard error, or `fallback` when it is not a terminal or does not say.
std::size_t stderr_columns(std::size_t fallback = 80);
/// Whether standard error is a terminal: only then is a bar drawn (a log file or a pipe must not get carriage
/// returns).
bool stderr_is_terminal();

}  // namespace plimsoll::telemetry
