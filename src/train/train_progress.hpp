#pragma once
// Progress of `plimsoll train` on stderr: on a terminal one line redrawn in place ("epoch 1/2 [#####.....] 120/469
// batches  loss 0.512  acc 81.2%  ETA 0:31"); in a log, a line at each quarter of an epoch. Epoch summaries are
// printed either way by the job.
#include <cstddef>
#include <cstdint>
#include <string>

namespace plimsoll::train {

class TrainProgress {
 public:
  TrainProgress(bool enabled, std::uint64_t epoch, std::uint64_t epochs, std::uint64_t batches);
  ~TrainProgress();
  TrainProgress(const TrainProgress&) = delete;
  TrainProgress& operator=(const TrainProgress&) = delete;

  void update(std::uint64_t done, double mean_loss, double accuracy);
  /// Erases the in-place line, so the epoch summary starts on a clean line.
  void finish();

 private:
  std::string line(std::uint64_t done, double mean_loss, double accuracy, double elapsed_s) const;

  bool enabled_;
  bool terminal_;
  std::uint64_t epoch_, epochs_, batches_;
  double started_s_;
  double last_draw_s_ = -1;
  std::uint64_t next_quarter_ = 1;
  std::size_t drawn_width_ = 0;
};

}  // namespace plimsoll::train
