// Several threads allocating and freeing on one device at once (run under TSan in CI).
#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <vector>

#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"

namespace plimsoll {
namespace {

TEST(EngineThreads, ConcurrentAllocateFreeKeepsExactAccounts) {
  DeviceDescription d;
  d.name = "sim:4GiB";
  d.limit_bytes = 2ull << 30;
  d.total_bytes = 4ull << 30;
  Allocator a(d, std::make_unique<backings::SimBacking>(4ull << 30));
  const Tag tags[2] = {intern_tag("thread0"), intern_tag("thread1")};
  auto work = [&](int id) {
    std::mt19937_64 random(static_cast<std::uint64_t>(id));
    std::vector<void*> live;
    for (int op = 0; op < 200000; ++op) {
      if (live.size() < 64 && (live.empty() || random() % 2)) {
        live.push_back(a.allocate(256 + random() % (1 << 20), tags[id]));
      } else {
        std::size_t pick = random() % live.size();
        a.deallocate(live[pick]);
        live[pick] = live.back();
        live.pop_back();
      }
      if (op % 10000 == 0) (void)a.stats();
    }
    for (void* p : live) a.deallocate(p);
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  Stats s = a.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.allocations, s.frees);
  for (const TagStats& t : s.tags) EXPECT_EQ(t.in_use_bytes, 0u) << t.tag;
}

}  // namespace
}  // namespace plimsoll
