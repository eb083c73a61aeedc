#pragma once
// `plimsoll train --nproc N`: starts N copies of this very command on this machine, one per rank, with the
// variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), waits for them, and stops the
// rest when one fails, so that no rank is left behind waiting in a collective.
#include <chrono>
#include <string>
#include <vector>

namespace plimsoll::train {

/// Set in the environment of every rank the launcher starts: a rank that sees it trains instead of launching.
inline constexpr const char* kLaunchedRankVariable = "PLIMSOLL_TRAIN_LAUNCHED";

/// Exit status of a rank that stopped because another rank failed (its own work was fine).
inline constexpr int kExitStoppedByOtherRank = 5;

struct LaunchOptions {
  int processes = 2;
  /// This process's command line (/proc/self/cmdline): each rank runs it again.
  std::vector<std::string> command;
  /// How long the others get to stop by themselves after one failed (their collectives time out by then), before
  /// they are killed.
  std::chrono::milliseconds grace{std::chrono::seconds(60)};
  bool quiet = false;  // no "started rank" lines
};

/// Runs the ranks to completion and returns the job's exit status: 0 when every rank succeeded; else the status
/// of the rank whose failure stopped the job (an out-of-memory's 3; 128 + N for a rank killed by signal N), not
/// that of the ranks it stopped. Every rank's output goes to this process's stderr; rank 0's stdout is this
/// process's, the others' is discarded (rank 0 prints the job's report).
int launch_ranks(const LaunchOptions& options);

/// This process's command line, as the kernel has it.
std::vector<std::string> own_command_line();

}  // namespace plimsoll::train
