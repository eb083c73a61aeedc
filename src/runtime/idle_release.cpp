// IdleRelease: returns the cached memory of devices that went idle (include/plimsoll/idle_release.hpp).
#include "plimsoll/idle_release.hpp"

#include <string>
#include <utility>

#include "plimsoll/allocator.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/stats.hpp"

namespace plimsoll {

void IdleReleaseOptions::validate() const {
  if (idle_after.count() <= 0 || check_every.count() <= 0) {
    throw InvalidArgument("idle release: idle_after and check_every must be positive durations (milliseconds); "
                          "to keep cached memory mapped, do not start an IdleRelease");
  }
  if (check_every > idle_after) {
    throw InvalidArgument("idle release: check_every (" + std::to_string(check_every.count()) +
                          " ms) is longer than idle_after (" + std::to_string(idle_after.count()) +
                          " ms); check at least as often as the idle time, e.g. a tenth of it");
  }
}

IdleReleaseOptions host_idle_release_defaults() { return IdleReleaseOptions{}; }

IdleRelease::IdleRelease(std::vector<Allocator*> devices, IdleReleaseOptions options) : options_(options) {
  options_.validate();
  for (Allocator* device : devices) {
    if (device == nullptr) throw InvalidArgument("idle release: a null device; pass the devices to watch");
    watched_.push_back(Watched{device});
  }
}

IdleRelease::~IdleRelease() { stop(); }

void IdleRelease::watch(Allocator& device) {
  std::lock_guard lock(mutex_);
  watched_.push_back(Watched{&device});
}

std::uint64_t IdleRelease::poll(std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(mutex_);
  std::uint64_t released = 0;
  for (Watched& watched : watched_) {
    const Stats stats = watched.device->stats();
    const std::uint64_t activity = stats.allocations + stats.frees;
    if (!watched.seen || activity != watched.activity) {
      // Busy since the last look (or first look): its cache is the working set of what it is doing.
      watched.seen = true;
      watched.activity = activity;
      watched.quiet_since = now;
      continue;
    }
    const std::uint64_t cached =
        stats.reserved_bytes > stats.in_use_bytes ? stats.reserved_bytes - stats.in_use_bytes : 0;
    if (cached <= options_.keep_cached_bytes || now - watched.quiet_since < options_.idle_after) continue;
    const std::uint64_t given_back = watched.device->trim();
    if (given_back > 0) {
      released += given_back;
      ++releases_;
    }
  }
  released_bytes_ += released;
  return released;
}

void IdleRelease::start() {
  std::lock_guard guard(mutex_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      wake_.wait_for(lock, options_.check_every, [this] { return stopping_; });
      if (stopping_) break;
      lock.unlock();  // poll takes the lock itself
      poll(std::chrono::steady_clock::now());
      lock.lock();
    }
  });
}

void IdleRelease::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::uint64_t IdleRelease::released_bytes() const {
  std::lock_guard lock(mutex_);
  return released_bytes_;
}

std::uint64_t IdleRelease::releases() const {
  std::lock_guard lock(mutex_);
  return releases_;
}

}  // namespace plimsoll
