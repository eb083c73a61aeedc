#pragma once
// One rank's memory as rank 0 of a multi-process job gathers it (every rank's device, peaks, and leak verdict), and
// its JSON object: the one spelling of its keys, used both to send it through the store and in `--json`'s `ranks`
// list (docs/train.md).
#include <cstdint>
#include <string>

namespace plimsoll::train {

struct RankReport {
  int rank = 0;
  long pid = 0;
  std::string host;
  std::string device;
  std::uint64_t limit_bytes = 0;
  std::uint64_t in_use_bytes = 0;
  std::uint64_t peak_in_use_bytes = 0;
  std::uint64_t reserved_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  bool leak = false;
  std::string leak_verdict;
  double leak_bytes_per_step = 0;
  std::uint64_t replica_checks = 0;  // steps whose replicas were checked equal (--verify-replicas)
  double step_seconds = 0;           // in training steps (forward, backward, all-reduce, optimizer)
  double all_reduce_seconds = 0;     // of which in the gradient all-reduce
};

/// The report as one JSON object, its keys in the order docs/train.md lists them.
std::string rank_report_json(const RankReport& report);
/// The report rank_report_json wrote. Throws InvalidState when `json` is not one (a rank of another version).
RankReport rank_report_of(const std::string& json);

}  // namespace plimsoll::train
