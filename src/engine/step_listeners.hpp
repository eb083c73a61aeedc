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

/// fork() (engine/fork_handlers.hpp): the registry's mutex, held across the fork so that no announcement is half way
/// in the child (where the thread making it does not exist) and no device joins or leaves meanwhile.
void lock_step_listeners_for_fork();
/// Makes the registry now (it is made at first use), so the fork handlers allocate nothing.
void make_step_listeners_for_fork();
void unlock_step_listeners_after_fork();

}  // namespace plimsoll::engine
