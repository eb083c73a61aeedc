#include "runtime/allocator_group.hpp"

#include <exception>
#include <string>

#include <fmt/format.h>

#include "plimsoll/error.hpp"

namespace plimsoll::runtime {

void AllocatorGroup::add(Allocator& allocator) {
  const std::lock_guard lock(mutex_);
  members_.push_back(&allocator);
}

ShareHooks AllocatorGroup::hooks() {
  return ShareHooks{
      .trim = [this] { trim(); },
      .in_use = [this] { return in_use(); },
      .pause = [this](bool keep_contents) { return pause(keep_contents); },
      .resume = [this] { resume(); },
      .paused = [this] { return paused(); },
  };
}

void AllocatorGroup::trim() {
  const std::lock_guard lock(mutex_);
  for (Allocator* member : members_) member->trim();
}

std::uint64_t AllocatorGroup::in_use() {
  const std::lock_guard lock(mutex_);
  std::uint64_t bytes = 0;
  for (const Allocator* member : members_) bytes += member->usage().in_use_bytes;
  return bytes;
}

std::uint64_t AllocatorGroup::pause(bool keep_contents) {
  const std::lock_guard lock(mutex_);
  if (members_.empty()) throw InvalidState("no device of this GPU was created yet: nothing to pause");
  std::vector<Allocator*> running;
  for (Allocator* member : members_)
    if (!member->paused()) running.push_back(member);
  // Nothing left to pause: the first member's own refusal ("paused already") is the answer.
  if (running.empty()) return members_.front()->pause(PauseOptions{.keep_contents = keep_contents});
  // A device that cannot pause is found before any is paused: a rollback maps fresh granules back, so a device paused
  // without its contents and then resumed would go on with undefined memory under its live blocks.
  for (const Allocator* member : running) member->check_pausable(PauseOptions{.keep_contents = keep_contents});
  std::uint64_t bytes = 0;
  std::vector<Allocator*> paused_here;
  try {
    for (Allocator* member : running) {
      bytes += member->pause(PauseOptions{.keep_contents = keep_contents});
      paused_here.push_back(member);
    }
  } catch (const std::exception& error) {
    // All or nothing: the GPU's devices are paused together or not at all.
    std::string left_paused;
    for (Allocator* member : paused_here) {
      try {
        member->resume();
      } catch (const std::exception&) {  // it stays paused and resumable: say so beside the pause's own error
        left_paused += (left_paused.empty() ? "" : ", ") + member->description().name;
      }
    }
    if (left_paused.empty()) throw;
    throw PauseError(fmt::format("{}; and {} could not be resumed, so it stays paused: resume it (plimsoll resume PID "
                                 "or plimsoll.resume) once the GPU has room",
                                 error.what(), left_paused));
  }
  return bytes;
}

void AllocatorGroup::resume() {
  const std::lock_guard lock(mutex_);
  if (members_.empty()) throw InvalidState("no device of this GPU was created yet: nothing to resume");
  bool any = false;
  for (Allocator* member : members_) {
    if (!member->paused()) continue;
    any = true;
    member->resume();
  }
  if (!any) members_.front()->resume();  // its own refusal ("not paused") is the answer
}

std::optional<std::uint64_t> AllocatorGroup::paused() {
  const std::lock_guard lock(mutex_);
  std::optional<std::uint64_t> bytes;
  for (const Allocator* member : members_)
    if (member->paused()) bytes = bytes.value_or(0) + member->paused_bytes();
  return bytes;
}

}  // namespace plimsoll::runtime
