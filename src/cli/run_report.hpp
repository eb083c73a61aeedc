#pragma once
// The report of `plimsoll run` (run_report.cpp): read back from what the child left, after it is gone.
#include <string>

namespace plimsoll::cli {

/// How the child ended.
struct ChildEnd {
  int exit_status = 0;  // what `run` passes on: the child's status, or 128 + the signal
  int signal = 0;       // the signal that ended the child, or 0
};

/// The report's destinations, from run's options.
struct RunOutputs {
  std::string record;  // --record: the recording is kept there ("" = a temporary one)
  std::string html;
  std::string json;
  bool quiet = false;
};

/// Reads `run_dir`/stats.json (the child's devices, hooks, notes, OOM reports; absent when the child died without
/// exiting) and the recording (steps, Python call sites), runs the leak watch, writes --json and --html and prints
/// the report on stderr unless quiet. Returns the status `run` exits with: the child's, or 125 when an output could
/// not be written.
int report_run(const RunOutputs& outputs, const ChildEnd& end, const std::string& run_dir, const std::string& recording);

}  // namespace plimsoll::cli
