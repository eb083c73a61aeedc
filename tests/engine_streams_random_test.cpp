// Stream-ordered reuse under a seeded random workload on the fake CUDA driver, against an independent checker.
// Four streams launch work, are held busy and released at random; blocks are allocated and freed on random
// streams, sometimes used on a second stream first (record_stream). The checker keeps its own model: for every
// freed range, which streams' work (up to which submission) must complete before another stream may reuse it.
// After every allocation it checks that the new block overlaps no live block and no freed range whose
// streams are still busy, unless the allocating stream is the one it was freed on and no other stream used it.
// It also checks the contents of live blocks, the stats against the model, and that everything returns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "fake_cuda_device.hpp"

namespace plimsoll {
namespace {

using fake_cuda::fake_cuda_allocator;
using fake_cuda::on;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr int kStreams = 4;

struct Model {
  struct Live {
    std::uint64_t bytes;
    int stream;                // allocation stream (the free's stream)
    std::vector<int> others;   // record_stream
    unsigned char fill;
  };
  struct Freed {
    std::uint64_t end;
    int stream;
    bool others;                     // used on other streams too: nobody may reuse it early
    std::uint64_t need[kStreams];    // submissions each stream must complete first
  };
  std::map<std::uint64_t, Live> live;
  std::vector<std::pair<std::uint64_t, Freed>> freed;  // pruned once safe
  std::uint64_t submitted[kStreams] = {};
  std::uint64_t completed[kStreams] = {};
  bool held[kStreams] = {};

  bool safe(const Freed& f) const {
    for (int s = 0; s < kStreams; ++s)
      if (completed[s] < f.need[s]) return false;
    return true;
  }
  void prune() {
    std::erase_if(freed, [&](const auto& entry) { return safe(entry.second); });
  }
  // Empty when fine, else what went wrong.
  std::string check_new(std::uint64_t addr, std::uint64_t bytes, int stream) const {
    const std::uint64_t end = addr + std::max<std::uint64_t>(bytes, 1);
    auto next = live.upper_bound(addr);
    if (next != live.end() && next->first < end) return "overlaps a live block";
    if (next != live.begin() && std::prev(next)->first + std::max<std::uint64_t>(std::prev(next)->second.bytes, 1) > addr)
      return "overlaps a live block";
    for (const auto& [start, f] : freed) {
      if (start >= end || f.end <= addr || safe(f)) continue;
      if (f.stream == stream && !f.others) continue;  // stream order protects it
      return "reuses memory another stream's pending work still uses";
    }
    return {};
  }
};

void run(std::uint32_t seed, int operations) {
  fake_cuda::Driver driver(fake_cuda::Options{.capacity_bytes = 256 * MiB});
  const std::uint64_t limit = 96 * MiB;
  auto allocator = fake_cuda_allocator(driver, limit);
  fake_cuda::Stream* streams[kStreams];
  for (auto& stream : streams) stream = &driver.create_stream();
  Model model;
  std::mt19937_64 random(seed);
  auto pick = [&](std::uint64_t n) { return random() % n; };
  auto release = [&](int s) {
    streams[s]->release();
    model.held[s] = false;
    model.completed[s] = model.submitted[s];
  };
  auto release_all = [&] {
    for (int s = 0; s < kStreams; ++s) release(s);
    model.prune();
  };
  auto size = [&]() -> std::uint64_t {
    switch (pick(4)) {
      case 0: return pick(4096);
      case 1: return 1 + pick(MiB);
      case 2: return MiB + pick(3 * MiB);
      default: return std::uint64_t{1} << (8 + pick(15));  // 256 B .. 4 MiB, powers of two as in the traces
    }
  };
  std::uint64_t reuses_seen = 0;

  for (int op = 0; op < operations; ++op) {
    const std::uint64_t kind = pick(100);
    if (kind < 40) {  // allocate on a random stream
      const int s = static_cast<int>(pick(kStreams));
      const std::uint64_t bytes = size();
      // Keep away from the limit while streams are held: the out-of-memory path would wait for them forever.
      const Stats stats = allocator->stats();
      if (stats.in_use_bytes + bytes > limit * 2 / 5) continue;  // full enough: let the frees catch up
      if (stats.in_use_bytes + stats.parked_bytes + bytes + 16 * MiB > limit / 2) release_all();
      void* ptr = allocator->try_allocate(bytes, on(*streams[s]));
      ASSERT_NE(ptr, nullptr) << "op " << op << ": " << bytes << " bytes; in use " << allocator->stats().in_use_bytes
                              << ", parked " << allocator->stats().parked_bytes << ", reserved "
                              << allocator->stats().reserved_bytes << ", driver " << driver.mapped_bytes() << " of "
                              << driver.used_bytes() << "; " << allocator->snapshot().substr(0, 3000);
      const auto addr = reinterpret_cast<std::uint64_t>(ptr);
      const std::string problem = model.check_new(addr, bytes, s);
      ASSERT_TRUE(problem.empty()) << "op " << op << " stream " << s << ": " << problem;
      for (const auto& [start, f] : model.freed)
        if (!model.safe(f) && start < addr + std::max<std::uint64_t>(bytes, 1) && addr < f.end) ++reuses_seen;
      const auto fill = static_cast<unsigned char>(op);
      if (bytes > 0) std::memset(ptr, fill, std::min<std::uint64_t>(bytes, 4096));
      model.live[addr] = Model::Live{bytes, s, {}, fill};
    } else if (kind < 75 && !model.live.empty()) {  // free on the allocation stream
      auto it = model.live.begin();
      std::advance(it, static_cast<long>(pick(std::min<std::size_t>(model.live.size(), 64))));
      const auto [addr, block] = *it;
      const auto* bytes = reinterpret_cast<const unsigned char*>(addr);
      for (std::uint64_t i = 0; i < std::min<std::uint64_t>(block.bytes, 4096); i += 97)
        ASSERT_EQ(bytes[i], block.fill) << "a live block's contents changed (op " << op << ")";
      Model::Freed f{.end = addr + std::max<std::uint64_t>((block.bytes + 255) / 256 * 256, 256), .stream = block.stream,
                     .others = !block.others.empty(), .need = {}};
      f.need[block.stream] = model.submitted[block.stream];
      for (int other : block.others) f.need[other] = model.submitted[other];
      model.freed.emplace_back(addr, f);
      model.live.erase(it);
      allocator->deallocate(reinterpret_cast<void*>(addr), on(*streams[block.stream]));
    } else if (kind < 80 && !model.live.empty()) {  // use a live block on another stream too
      auto it = model.live.begin();
      std::advance(it, static_cast<long>(pick(model.live.size())));
      const int other = static_cast<int>(pick(kStreams));
      if (other != it->second.stream) {
        allocator->record_stream(reinterpret_cast<void*>(it->first), on(*streams[other]));
        it->second.others.push_back(other);
        streams[other]->launch();
        ++model.submitted[other];
        if (!model.held[other]) model.completed[other] = model.submitted[other];
      }
    } else if (kind < 92) {  // launch work on a stream
      const int s = static_cast<int>(pick(kStreams));
      streams[s]->launch();
      ++model.submitted[s];
      if (!model.held[s]) model.completed[s] = model.submitted[s];
    } else if (kind < 97) {  // hold or release a stream
      const int s = static_cast<int>(pick(kStreams));
      if (model.held[s]) {
        release(s);
      } else {
        streams[s]->hold();
        model.held[s] = true;
      }
      model.prune();
    } else if (kind < 98) {
      release_all();
      allocator->trim();
      ASSERT_EQ(allocator->stats().parked_bytes, 0u) << "trim waits for every parked block";
    }
    if (op % 512 == 0) {
      const Stats stats = allocator->stats();
      ASSERT_EQ(stats.live_allocations, model.live.size());
      ASSERT_EQ(driver.mapped_bytes(), stats.reserved_bytes);
      ASSERT_LE(stats.reserved_bytes, limit);
    }
  }
  release_all();
  for (const auto& [addr, block] : model.live) allocator->deallocate(reinterpret_cast<void*>(addr), on(*streams[block.stream]));
  allocator->trim();
  const Stats stats = allocator->stats();
  EXPECT_EQ(stats.in_use_bytes, 0u);
  EXPECT_EQ(stats.parked_bytes, 0u);
  EXPECT_EQ(stats.live_allocations, 0u);
  EXPECT_EQ(stats.reserved_bytes, 0u);
  EXPECT_EQ(driver.mapped_bytes(), 0u);
  EXPECT_GT(allocator->stats().allocations, 0u);
  EXPECT_GT(reuses_seen, 0u) << "the workload never reused freed memory: it tests nothing";
}

TEST(EngineStreamsRandom, NoStreamGetsMemoryAnotherStreamStillUses) {
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    run(seed, 30000);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace plimsoll
