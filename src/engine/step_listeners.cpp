#include "engine/step_listeners.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

#include "plimsoll/allocator.hpp"

namespace plimsoll::engine {
namespace {
struct Listeners {
  std::mutex mutex;
  std::vector<Allocator*> devices;
};

Listeners& listeners() {
  static Listeners* instance = new Listeners;  // never destroyed: devices may outlive static destruction order
  return *instance;
}
}  // namespace

void listen_for_steps(Allocator* device) {
  Listeners& all = listeners();
  std::lock_guard guard(all.mutex);
  all.devices.push_back(device);
}

void stop_listening_for_steps(Allocator* device) {
  Listeners& all = listeners();
  std::lock_guard guard(all.mutex);
  all.devices.erase(std::remove(all.devices.begin(), all.devices.end(), device), all.devices.end());
}

void make_step_listeners_for_fork() { (void)listeners(); }

void lock_step_listeners_for_fork() { listeners().mutex.lock(); }

void unlock_step_listeners_after_fork() { listeners().mutex.unlock(); }

void announce_step() {
  Listeners& all = listeners();
  std::lock_guard guard(all.mutex);
  for (Allocator* device : all.devices) device->step();
}

}  // namespace plimsoll::engine
