// The handed-out table's recent-leaf slots under threads (src/engine/handed_table.hpp): leaves whose keys share a
// slot are made and replace one another in it while other threads set, find and clear words in them, at the same
// offsets in every thread's leaves. Every thread must read back exactly its own words. Mainly for TSan (CI's threads
// label): the slot's key compare itself is checked deterministically by
// EngineHandedTable.LeavesSharingARecentSlotReadTheirOwnWords; here a slot that ignored its key failed in 1-2 of 5
// runs on two cores (the threads must meet at one offset at one moment).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "engine/handed_table.hpp"

namespace {

using plimsoll::engine::HandedTable;

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
constexpr std::uint64_t kRegion = std::uint64_t{1} << HandedTable::kRegionShift;

TEST(ThreadsHandedTable, ThreadsWhoseLeavesShareARecentSlotReadTheirOwnWords) {
  HandedTable table;
  constexpr int kThreads = 6;
  constexpr int kRounds = 20000;
  std::atomic<int> mismatches{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Keys 5 + 16 i all share slot 5: each thread has two leaves of its own there, so the slot changes hands
      // between every thread's operations.
      const std::uint64_t mine[2] = {(5 + 16 * std::uint64_t(2 * t + 1)) * kGiB,
                                     (5 + 16 * std::uint64_t(2 * t + 2)) * kGiB};
      while (!go.load()) std::this_thread::yield();
      for (int round = 0; round < kRounds; ++round) {
        // The same offsets in every thread's leaves: a word that lands in another thread's leaf meets its words.
        const std::uint64_t addr = mine[round % 2] + std::uint64_t(round % 4) * kRegion;
        const auto tag = static_cast<std::uint16_t>(t + 1);
        const std::uint64_t requested = 256 + std::uint64_t(round % 7);
        if (round % 3 == 0) {
          if (!table.set(addr, HandedTable::word(requested, tag))) {
            mismatches.fetch_add(1);
            continue;
          }
        } else {
          if (!table.prepare(addr, false)) {
            mismatches.fetch_add(1);
            continue;
          }
          HandedTable::set_prepared(table.prepared_leaf(addr, false), addr, HandedTable::word(requested, tag));
        }
        const HandedTable::Found found = table.find(addr);
        if (found.word != HandedTable::word(requested, tag)) mismatches.fetch_add(1);
        HandedTable::clear_in(found.leaf, addr, found.word);
        if (table.get(addr) != 0) mismatches.fetch_add(1);
      }
    });
  }
  go.store(true);
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0) << "a word was written or read in another thread's leaf through a shared slot";
  for (int t = 0; t < kThreads; ++t) {  // nothing left set, in any of the leaves
    for (int i = 1; i <= 2; ++i)
      EXPECT_EQ(table.get((5 + 16 * std::uint64_t(2 * t + i)) * kGiB), 0u);
  }
}

}  // namespace
