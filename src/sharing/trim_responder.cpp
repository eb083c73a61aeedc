// Answers the ledger within a bounded time (trim requests, pause and resume), and keeps the entry's in-use bytes
// current, for processes that may not allocate again soon.
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "plimsoll/allocator.hpp"
#include "plimsoll/sharing.hpp"

namespace plimsoll {

struct TrimResponder::State {
  std::mutex mutex;
  std::condition_variable stop_requested;
  bool stopping = false;
  std::thread thread;
};

TrimResponder::TrimResponder(GpuShare& share, ShareHooks hooks, std::chrono::milliseconds period)
    : state_(std::make_unique<State>()) {
  state_->thread = std::thread([&share, hooks = std::move(hooks), period, state = state_.get()] {
    std::unique_lock lock(state->mutex);
    while (!state->stop_requested.wait_for(lock, period, [state] { return state->stopping; })) {
      lock.unlock();
      try {
        share.honour_requests(hooks);
      } catch (const std::exception& error) {  // a trim that threw: the thread goes on answering
        std::fprintf(stderr, "plimsoll: answering the GPU ledger failed: %s\n", error.what());
      } catch (...) {  // a hook that threw something else: still no reason to stop answering
        std::fprintf(stderr, "plimsoll: answering the GPU ledger failed (a hook threw a non-standard exception)\n");
      }
      lock.lock();
    }
  });
}

TrimResponder::TrimResponder(GpuShare& share, std::function<void()> trim, std::chrono::milliseconds period)
    : TrimResponder(share, ShareHooks{.trim = std::move(trim), .in_use = {}, .pause = {}, .resume = {}, .paused = {}}, period) {}

TrimResponder::~TrimResponder() {
  {
    const std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->stop_requested.notify_all();
  state_->thread.join();
}

ShareHooks allocator_hooks(Allocator& allocator) {
  return ShareHooks{
      .trim = [&allocator] { allocator.trim(); },
      .in_use = [&allocator] { return allocator.usage().in_use_bytes; },
      .pause = [&allocator](bool keep_contents) { return allocator.pause(PauseOptions{.keep_contents = keep_contents}); },
      .resume = [&allocator] { allocator.resume(); },
      .paused = [&allocator]() -> std::optional<std::uint64_t> {
        if (!allocator.paused()) return std::nullopt;
        return allocator.paused_bytes();
      },
  };
}

}  // namespace plimsoll
