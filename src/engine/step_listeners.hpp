#pragma once
// Which devices hear plimsoll::step(): every Allocator, from its construction to its destruction, so that step-aware
// placement (src/engine/plan_follower.hpp) is on by default for every device of a program that marks its steps.
// Lock order: the registry's mutex, then a device's lock (announce_step holds the first while it calls
// Allocator::step). An Allocator leaves in its destructor, which waits for an announcement under way.
namespace plimsoll {
class Allocator;
}

namespace plimsoll::engine {

void listen_for_steps(Allocator* device);
void stop_listening_for_steps(Allocator* device);
/// Calls Allocator::step() on every listening device.
void announce_step();

}  // namespace plimsoll::engine
