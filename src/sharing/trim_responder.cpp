// Answers trim requests within a bounded time, for processes that may not allocate again soon.
#include <condition_variable>
#include <mutex>
#include <thread>

#include "plimsoll/sharing.hpp"

namespace plimsoll {

struct TrimResponder::State {
  std::mutex mutex;
  std::condition_variable stop_requested;
  bool stopping = false;
  std::thread thread;
};

TrimResponder::TrimResponder(GpuShare& share, std::function<void()> trim, std::chrono::milliseconds period)
    : state_(std::make_unique<State>()) {
  state_->thread = std::thread([&share, trim = std::move(trim), period, state = state_.get()] {
    std::unique_lock lock(state->mutex);
    while (!state->stop_requested.wait_for(lock, period, [state] { return state->stopping; })) {
      lock.unlock();
      share.honour_trim_request(trim);
      lock.lock();
    }
  });
}

TrimResponder::~TrimResponder() {
  {
    const std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->stop_requested.notify_all();
  state_->thread.join();
}

}  // namespace plimsoll
