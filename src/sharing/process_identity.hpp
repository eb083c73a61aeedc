#pragma once
// Who a ledger entry belongs to: a pid alone is not enough, since the kernel reuses pids, so an entry also keeps
// the process's start time (field 22 of /proc/PID/stat, in clock ticks since boot), which a new process with the
// same pid cannot have.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace plimsoll::sharing {

struct ProcessIdentity {
  int pid = 0;
  std::uint64_t start_time = 0;
  friend bool operator==(const ProcessIdentity&, const ProcessIdentity&) = default;
};

/// What /proc/PID/stat says: the start time and whether the process has exited (state Z or X: its memory, GPU
/// memory included, is already given back; only the parent has not collected its status yet).
struct ProcStat {
  std::uint64_t start_time = 0;
  bool exited = false;
};

/// Parses the text of /proc/PID/stat. Nothing for text that is not one (the command may hold blanks and
/// parentheses: the fields after it are found from the last ')').
std::optional<ProcStat> parse_proc_stat(std::string_view text);

/// The calling process.
ProcessIdentity this_process();
/// Whether the process `who` names still runs: same pid, same start time, not exited.
bool is_running(const ProcessIdentity& who);
/// The command name of `pid` (/proc/PID/comm), or "?".
std::string command_of(int pid);

}  // namespace plimsoll::sharing
