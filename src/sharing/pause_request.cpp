// `plimsoll pause PID` / `plimsoll resume PID`: a request posted in each of the process's ledger entries, carried out
// by its TrimResponder (GpuShare::honour_requests), and waited for here.
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/sharing.hpp"
#include "sharing/control_requests.hpp"
#include "sharing/entry_liveness.hpp"
#include "sharing/ledger_scan.hpp"

namespace plimsoll {
namespace {

// A ledger entry of the process, found in a snapshot; checked before any request is posted.
struct Candidate {
  std::string path, uuid, command;
  int slot = 0;
  std::uint64_t start_time = 0;
  bool interposed = false;
};

struct Target {
  sharing::LedgerFile file;
  std::string uuid;
  int slot = 0;
  std::uint64_t start_time = 0;
  std::uint64_t sequence = 0;
};

const char* verb(sharing::ControlKind kind) { return kind == sharing::ControlKind::resume ? "resume" : "pause"; }

// Whether the slot still holds the process the snapshot found (not a newcomer that reused it).
bool same_process(const sharing::LedgerEntry& entry, int pid, std::uint64_t start_time) {
  return entry.pid.load(std::memory_order_acquire) == pid &&
         entry.start_time.load(std::memory_order_acquire) == start_time;
}

std::vector<Candidate> find_candidates(int pid, sharing::ControlKind kind, const std::string& ledger_dir) {
  const std::uint64_t namespace_here = sharing::this_pid_namespace();
  std::vector<Candidate> found;
  bool in_another_namespace = false;
  for (const sharing::LedgerReading& reading : sharing::read_ledgers(ledger_dir)) {
    if (!reading.snapshot) continue;
    for (const sharing::ProcessRow& row : reading.snapshot->processes) {
      if (row.pid != pid || !row.running) continue;
      // A pid from another pid namespace names another process there (every container has a pid 1).
      if (row.pid_namespace != 0 && namespace_here != 0 && row.pid_namespace != namespace_here) {
        in_another_namespace = true;
        continue;
      }
      found.push_back(Candidate{.path = reading.snapshot->path, .uuid = reading.snapshot->uuid,
                                .command = row.command, .slot = row.slot, .start_time = row.start_time,
                                .interposed = row.interposed});
    }
  }
  for (const Candidate& candidate : found)
    if (candidate.interposed)
      throw InvalidArgument(fmt::format(
          "process {} ({}) is governed at the CUDA driver (libplimsoll_cuda_intercept.so): its framework allocated "
          "its GPU memory, which plimsoll cannot unmap while keeping the framework's pointers. Only a process "
          "whose GPU memory is plimsoll's (a plimsoll Allocator answering the ledger through a TrimResponder) can "
          "be paused; nothing was posted to any GPU",
          pid, candidate.command));
  if (!found.empty()) return found;
  if (in_another_namespace)
    throw InvalidArgument(fmt::format("cannot {} process {}: pid {} is in another pid namespace; run plimsoll {} "
                                      "inside that container",
                                      verb(kind), pid, pid, verb(kind)));
  if (::kill(pid, 0) != 0 && errno == ESRCH)
    throw InvalidArgument(fmt::format("cannot {} process {}: no such process is running", verb(kind), pid));
  throw InvalidArgument(fmt::format(
      "cannot {} process {}: it is not governed (no GPU ledger in {} holds it). Only a process whose GPU memory is "
      "a plimsoll Allocator's, in the ledger through a GpuShare and answering through a TrimResponder given "
      "plimsoll::allocator_hooks(allocator), can be paused (docs/sharing.md, \"Pause and resume\"); `plimsoll top` "
      "lists the governed ones",
      verb(kind), pid, ledger_dir));
}

std::vector<ControlOutcome> request(int pid, sharing::ControlKind kind, std::chrono::milliseconds timeout,
                                    const std::string& ledger_dir) {
  if (pid <= 0) throw InvalidArgument(fmt::format("{} is not a process id; pass the pid of a governed job", pid));
  const std::vector<Candidate> candidates = find_candidates(pid, kind, ledger_dir);
  constexpr const char* kLeft = "the process left the GPU's ledger (it exited) before answering";
  std::vector<ControlOutcome> outcomes(candidates.size());
  std::vector<std::optional<Target>> targets(candidates.size());
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& candidate = candidates[i];
    const ControlOutcome gone{.gpu_uuid = candidate.uuid, .done = false, .answered = false, .message = kLeft};
    std::optional<sharing::LedgerFile> file;
    try {
      file.emplace(sharing::LedgerFile::open_existing(candidate.path));  // a removed file is not made again
    } catch (const Error&) {
      outcomes[i] = gone;
      continue;
    }
    sharing::LedgerEntry& entry = file->layout().entries[candidate.slot];
    if (!same_process(entry, pid, candidate.start_time)) {
      outcomes[i] = gone;
      continue;
    }
    const std::uint64_t sequence = sharing::post_control(entry, kind);
    if (!same_process(entry, pid, candidate.start_time)) {  // a newcomer took the slot meanwhile: not its request
      sharing::withdraw_control(entry, sequence, kind);
      outcomes[i] = gone;
      continue;
    }
    targets[i].emplace(Target{.file = std::move(*file), .uuid = candidate.uuid, .slot = candidate.slot,
                              .start_time = candidate.start_time, .sequence = sequence});
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool waiting = false;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (!targets[i]) continue;
      const Target& target = *targets[i];
      const sharing::LedgerEntry& entry = target.file.layout().entries[target.slot];
      ControlOutcome& outcome = outcomes[i];
      if (const auto answer = sharing::answer_to(entry, target.sequence)) {
        outcome.gpu_uuid = target.uuid;
        outcome.done = answer->status == sharing::ControlStatus::done && !answer->superseded;
        outcome.message = answer->superseded ? "another request was posted meanwhile and answered instead: " +
                                                   answer->message
                                             : answer->message;
      } else if (!same_process(entry, pid, target.start_time)) {
        outcome = ControlOutcome{.gpu_uuid = target.uuid, .done = false, .answered = false, .message = kLeft};
      } else {
        waiting = true;
        continue;
      }
      targets[i].reset();
    }
    if (!waiting) return outcomes;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::string silent;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (!targets[i]) continue;
    Target& target = *targets[i];
    sharing::LedgerEntry& entry = target.file.layout().entries[target.slot];
    if (sharing::withdraw_control(entry, target.sequence, kind) || !sharing::answer_to(entry, target.sequence)) {
      outcomes[i] = ControlOutcome{.gpu_uuid = target.uuid, .done = false, .answered = false,
                                   .message = "no answer in time; the request was withdrawn"};
      silent += (silent.empty() ? "" : ", ") + target.uuid;
    } else {  // answered just now, between the last look and the withdrawal
      const auto answer = sharing::answer_to(entry, target.sequence);
      outcomes[i] = ControlOutcome{.gpu_uuid = target.uuid,
                                   .done = answer->status == sharing::ControlStatus::done && !answer->superseded,
                                   .message = answer->message};
    }
  }
  if (silent.empty()) return outcomes;
  throw ControlTimeout(
      fmt::format("process {} did not answer the {} request within {} ms (on {}): a plimsoll process answers within "
                  "its TrimResponder's period (20 ms by default), so it has none with a {} hook, or it is stopped or "
                  "busy. The unanswered requests were withdrawn (one the process had already begun is still "
                  "carried out); check with `plimsoll top`",
                  pid, verb(kind), timeout.count(), silent, verb(kind)),
      std::move(outcomes));
}

}  // namespace

std::vector<ControlOutcome> request_pause(int pid, bool keep_contents, std::chrono::milliseconds timeout,
                                          const std::string& ledger_dir) {
  return request(pid, keep_contents ? sharing::ControlKind::pause_keeping_contents : sharing::ControlKind::pause,
                 timeout, ledger_dir);
}

std::vector<ControlOutcome> request_resume(int pid, std::chrono::milliseconds timeout, const std::string& ledger_dir) {
  return request(pid, sharing::ControlKind::resume, timeout, ledger_dir);
}

}  // namespace plimsoll
