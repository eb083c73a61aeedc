// fork() beside the tag table's mutex (src/engine/tag_table.hpp, step 6 of engine/fork_handlers.hpp): a thread
// inside intern_tag at a fork left it held in the child, whose next tagged allocation hung. A thread is parked
// inside intern_tag, holding the table's mutex (the new-tag seam, on its cold path), until the fork's preparation
// asks for that mutex (engine::fork_locking_tag_table()) or the fork is over without having asked (the code
// before); the main thread forks; the child allocates with a tag and names it; the parent fails the test if the
// child does not exit cleanly in time.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string_view>
#include <thread>

#include "backings/sim_backing.hpp"
#include "engine/fork_handlers.hpp"
#include "engine/tag_table.hpp"
#include "fork_child.hpp"
#include "plimsoll/allocator.hpp"
#include "sim_device.hpp"

namespace plimsoll {
namespace {

std::atomic<bool> park_next_new_tag{false}, holder_parked{false}, forked{false};

void park_while_holding_the_tag_table() {
  if (!park_next_new_tag.exchange(false)) return;
  holder_parked = true;
  while (!engine::fork_locking_tag_table() && !forked.load()) std::this_thread::yield();
}

TEST(ThreadsTagFork, ForkWhileAnotherThreadInternsATagLeavesAWorkingChild) {
  Allocator device(testing_support::sim_device(), std::make_unique<backings::SimBacking>(4ull << 30));
  device.deallocate(device.allocate(4096, "warm-up"));  // the handlers installed, the table made
  engine::set_new_tag_seam(&park_while_holding_the_tag_table);
  park_next_new_tag = true;
  std::atomic<bool> holder_done{false}, holder_may_exit{false};
  std::thread holder([&] {
    (void)intern_tag("a tag name nobody used before");  // parked holding the table's mutex
    holder_done = true;
    while (!holder_may_exit.load()) std::this_thread::yield();  // alive until the parent is done (TSan)
  });
  while (!holder_parked.load()) std::this_thread::yield();

  const pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    void* p = device.allocate(4096, "tag");  // interns a new tag: hung here before
    if (p == nullptr) _exit(2);
    if (tag_name(intern_tag("tag")) != std::string_view("tag")) _exit(3);
    device.deallocate(p);
    _exit(0);
  }
  forked = true;
  int status = 0;
  const bool exited = fork_test::child_exited_in_time(child, status);
  while (!holder_done.load()) std::this_thread::yield();
  holder_may_exit = true;
  holder.join();
  engine::set_new_tag_seam(nullptr);
  EXPECT_TRUE(exited) << "the child hung: the tag table's mutex, held by a thread that does not exist in it";
  if (exited) {
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's check number " << WEXITSTATUS(status) << " failed";
  }
  EXPECT_EQ(device.stats().live_allocations, 0u);
}

}  // namespace
}  // namespace plimsoll
