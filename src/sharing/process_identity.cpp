#include "sharing/process_identity.hpp"

#include <unistd.h>

#include <string>

#include "devices/proc_text.hpp"

namespace plimsoll::sharing {

std::optional<ProcStat> parse_proc_stat(std::string_view text) {
  // "pid (comm) state ppid ..." with start time the 22nd field, the 20th after the state (the 3rd).
  const std::size_t close = text.rfind(')');
  if (close == std::string_view::npos || close + 2 >= text.size()) return std::nullopt;
  std::string_view rest = text.substr(close + 2);
  ProcStat stat;
  for (int field = 3; field <= 22; ++field) {
    const std::size_t blank = rest.find(' ');
    const std::string_view value = rest.substr(0, blank);
    if (value.empty()) return std::nullopt;
    if (field == 3) {
      if (value.size() != 1) return std::nullopt;
      stat.exited = value[0] == 'Z' || value[0] == 'X' || value[0] == 'x';
    }
    if (field == 22) {
      const auto start = parse_decimal(trim_blanks(value));
      if (!start) return std::nullopt;
      stat.start_time = *start;
      return stat;
    }
    if (blank == std::string_view::npos) return std::nullopt;
    rest = rest.substr(blank + 1);
  }
  return std::nullopt;
}

namespace {

std::optional<ProcStat> stat_of(int pid) {
  const auto text = read_text_file("/proc/" + std::to_string(pid) + "/stat");
  if (!text) return std::nullopt;
  return parse_proc_stat(*text);
}

}  // namespace

ProcessIdentity this_process() {
  const int pid = static_cast<int>(::getpid());
  const auto stat = stat_of(pid);
  return ProcessIdentity{.pid = pid, .start_time = stat ? stat->start_time : 0};
}

bool is_running(const ProcessIdentity& who) {
  if (who.pid <= 0) return false;
  const auto stat = stat_of(who.pid);
  return stat && !stat->exited && stat->start_time == who.start_time;
}

std::string command_of(int pid) {
  const auto text = read_text_file("/proc/" + std::to_string(pid) + "/comm");
  if (!text) return "?";
  const std::string_view name = trim_blanks(*text);
  return name.empty() ? std::string("?") : std::string(name);
}

}  // namespace plimsoll::sharing
