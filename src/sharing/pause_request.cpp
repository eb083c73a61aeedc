// `plimsoll pause PID` / `plimsoll resume PID`: a request posted in each of the process's ledger entries, carried out
// by its TrimResponder (GpuShare::honour_requests), and waited for here.
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "plimsoll/error.hpp"
#include "plimsoll/sharing.hpp"
#include "sharing/control_requests.hpp"
#include "sharing/ledger_scan.hpp"

namespace plimsoll {
namespace {

struct Target {
  sharing::LedgerFile file;
  std::string uuid;
  int slot = 0;
  std::uint64_t sequence = 0;
};

const char* verb(sharing::ControlKind kind) { return kind == sharing::ControlKind::resume ? "resume" : "pause"; }

std::vector<ControlOutcome> request(int pid, sharing::ControlKind kind, std::chrono::milliseconds timeout,
                                    const std::string& ledger_dir) {
  if (pid <= 0) throw InvalidArgument(fmt::format("{} is not a process id; pass the pid of a governed job", pid));
  std::vector<Target> targets;
  for (const sharing::LedgerReading& reading : sharing::read_ledgers(ledger_dir)) {
    if (!reading.snapshot) continue;
    for (const sharing::ProcessRow& row : reading.snapshot->processes) {
      if (row.pid != pid || !row.running) continue;
      if (row.interposed)
        throw InvalidArgument(fmt::format(
            "process {} ({}) is governed at the CUDA driver (libplimsoll_cuda_intercept.so): its framework allocated "
            "its GPU memory, which plimsoll cannot unmap while keeping the framework's pointers. Only a process "
            "whose GPU memory is plimsoll's (a plimsoll Allocator answering the ledger through a TrimResponder) can "
            "be paused",
            pid, row.command));
      sharing::LedgerFile file =
          sharing::LedgerFile::open_or_create(ledger_dir, reading.snapshot->uuid, reading.snapshot->device_bytes);
      const std::uint64_t sequence = sharing::post_control(file.layout().entries[row.slot], kind);
      targets.push_back(Target{.file = std::move(file), .uuid = reading.snapshot->uuid, .slot = row.slot,
                               .sequence = sequence});
    }
  }
  if (targets.empty()) {
    if (::kill(pid, 0) != 0 && errno == ESRCH)
      throw InvalidArgument(fmt::format("cannot {} process {}: no such process is running", verb(kind), pid));
    throw InvalidArgument(fmt::format(
        "cannot {} process {}: it is not governed (no GPU ledger in {} holds it). Only jobs sharing a GPU through "
        "plimsoll (`plimsoll run --device cuda:N=SHARE`, a plimsoll Allocator in the ledger) can be paused; "
        "`plimsoll top` lists them",
        verb(kind), pid, ledger_dir));
  }
  std::vector<ControlOutcome> outcomes(targets.size());
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (std::size_t answered = 0;;) {
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (!outcomes[i].gpu_uuid.empty()) continue;
      const sharing::LedgerEntry& entry = targets[i].file.layout().entries[targets[i].slot];
      ControlOutcome& outcome = outcomes[i];
      if (entry.pid.load() != pid) {
        outcome = ControlOutcome{.gpu_uuid = targets[i].uuid, .done = false,
                                 .message = "the process left the GPU's ledger (it exited) before answering"};
      } else if (const auto answer = sharing::answer_to(entry, targets[i].sequence)) {
        outcome.gpu_uuid = targets[i].uuid;
        outcome.done = answer->status == sharing::ControlStatus::done && !answer->superseded;
        outcome.message = answer->superseded ? "another request was posted meanwhile and answered instead: " +
                                                   answer->message
                                             : answer->message;
      } else {
        continue;
      }
      ++answered;
    }
    if (answered == targets.size()) return outcomes;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::string silent;
  for (std::size_t i = 0; i < targets.size(); ++i)
    if (outcomes[i].gpu_uuid.empty()) silent += (silent.empty() ? "" : ", ") + targets[i].uuid;
  throw Error(fmt::format(
      "process {} did not answer the {} request within {} ms (on {}): a plimsoll process answers within its "
      "TrimResponder's period (20 ms by default), so it has none with a {} hook, or it is stopped or busy. The "
      "request stays posted and is carried out if it answers later; check with `plimsoll top`",
      pid, verb(kind), timeout.count(), silent, verb(kind)));
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
