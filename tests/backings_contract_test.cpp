// The backing contract (src/backings/backing.hpp), one suite run against every backing that runs without a GPU, as
// RMM runs one suite against every memory resource: host, simulated, CUDA virtual memory and plain regions over the
// fake driver, pinned host memory over the fake driver, fault injection, a logical device's view of a shared
// backing, and the shared-GPU adaptor over the fake driver. Each backing has 64 MiB to give; its own tests
// (backings_*_test.cpp) cover what only it does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backings/cuda_region_backing.hpp"
#include "backings/cuda_vmm_backing.hpp"
#include "backings/faulty_backing.hpp"
#include "backings/host_backing.hpp"
#include "backings/pinned_host_backing.hpp"
#include "backings/sim_backing.hpp"
#include "fake_cuda_driver.hpp"
#include "plimsoll/sharing.hpp"
#include "runtime/shared_backing.hpp"
#include "sharing/shared_gpu_backing.hpp"
#include "sharing_support.hpp"

namespace plimsoll::backings {
namespace {

using ::testing::HasSubstr;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kCapacity = 64 * MiB;

/// One backing under test with whatever it stands on (a fake driver, an upstream, a ledger directory).
struct Subject {
  std::unique_ptr<fake_cuda::Driver> driver;
  std::unique_ptr<plimsoll::testing::TempDirectory> ledger_dir;
  std::unique_ptr<GpuShare> share;
  std::unique_ptr<Backing> upstream;
  std::unique_ptr<runtime::SharedBacking> shared;
  std::unique_ptr<Backing> backing;
  bool maps_can_run_out = true;  // false: the memory is taken at reserve() (plain CUDA regions)
};

struct Kind {
  std::string name;
  std::function<std::unique_ptr<Subject>()> make;
};
void PrintTo(const Kind& kind, std::ostream* out) { *out << kind.name; }

fake_cuda::Options fake_gpu(std::uint64_t capacity) {
  fake_cuda::Options options;
  options.capacity_bytes = capacity;
  return options;
}

std::vector<Kind> kinds() {
  return {
      {"Host",
       [] {
         auto s = std::make_unique<Subject>();
         s->backing = std::make_unique<HostBacking>(2 * MiB, kCapacity);
         return s;
       }},
      {"Sim",
       [] {
         auto s = std::make_unique<Subject>();
         s->backing = std::make_unique<SimBacking>(kCapacity);
         return s;
       }},
      {"CudaVmmOnFakeDriver",
       [] {
         auto s = std::make_unique<Subject>();
         s->driver = std::make_unique<fake_cuda::Driver>(fake_gpu(kCapacity));
         s->backing = std::make_unique<CudaVmmBacking>(s->driver->api(), 0);
         return s;
       }},
      {"CudaRegionOnFakeDriver",
       [] {
         auto s = std::make_unique<Subject>();
         s->driver = std::make_unique<fake_cuda::Driver>(fake_gpu(kCapacity));
         s->backing = std::make_unique<CudaRegionBacking>(s->driver->api(), 0);
         s->maps_can_run_out = false;
         return s;
       }},
      {"PinnedHostOnFakeDriver",
       [] {
         auto s = std::make_unique<Subject>();
         s->driver = std::make_unique<fake_cuda::Driver>(fake_gpu(kCapacity));
         s->backing = std::make_unique<PinnedHostBacking>(s->driver->api(), 0, kCapacity);
         return s;
       }},
      {"FaultyWithoutFaults",
       [] {
         auto s = std::make_unique<Subject>();
         s->upstream = std::make_unique<SimBacking>(kCapacity);
         s->backing = std::make_unique<FaultyBacking>(*s->upstream, FaultPlan{});
         return s;
       }},
      {"LogicalDeviceView",
       [] {
         auto s = std::make_unique<Subject>();
         s->shared = std::make_unique<runtime::SharedBacking>(std::make_unique<SimBacking>(kCapacity));
         s->backing = s->shared->view();
         return s;
       }},
      {"SharedGpuOnFakeDriver",
       [] {
         auto s = std::make_unique<Subject>();
         // The GPU has twice the memory; the share's cap is what this process may map.
         s->driver = std::make_unique<fake_cuda::Driver>(fake_gpu(2 * kCapacity));
         s->ledger_dir = std::make_unique<plimsoll::testing::TempDirectory>();
         s->share = std::make_unique<GpuShare>("GPU-00000000-1111-2222-3333-555555555555", 2 * kCapacity,
                                               parse_share_spec("cuda:0=32MiB:64MiB"), s->ledger_dir->path());
         s->backing = make_shared_gpu_backing(*s->share, std::make_unique<CudaVmmBacking>(s->driver->api(), 0));
         return s;
       }},
  };
}

class BackingContract : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    subject_ = GetParam().make();
    g_ = backing().granularity();
  }
  Backing& backing() { return *subject_->backing; }

  std::unique_ptr<Subject> subject_;
  std::uint64_t g_ = 0;
};

std::string kind_name(const ::testing::TestParamInfo<Kind>& info) { return info.param.name; }

TEST_P(BackingContract, DescribesItselfWithAPowerOfTwoGranularity) {
  EXPECT_GT(g_, 0u);
  EXPECT_EQ(g_ & (g_ - 1), 0u);
  EXPECT_FALSE(backing().describe().empty());
  EXPECT_GT(backing().memory().total_bytes, 0u);
  EXPECT_EQ(backing().mapped_bytes(), 0u);
}

TEST_P(BackingContract, ReserveGivesAnAlignedRangeWithNothingMapped) {
  const std::uintptr_t base = backing().reserve(8 * g_);
  ASSERT_NE(base, 0u);
  EXPECT_EQ(base % g_, 0u);
  EXPECT_EQ(backing().mapped_bytes(), 0u);
  const std::uintptr_t other = backing().reserve(2 * g_);
  ASSERT_NE(other, 0u);
  EXPECT_TRUE(other + 2 * g_ <= base || base + 8 * g_ <= other) << "reservations overlap";
  backing().unreserve(other, 2 * g_);
  backing().unreserve(base, 8 * g_);
}

TEST_P(BackingContract, GranulesMapAndUnmapInAnyGrouping) {
  const std::uintptr_t base = backing().reserve(8 * g_);
  ASSERT_NE(base, 0u);
  ASSERT_TRUE(backing().map(base, 3 * g_));
  EXPECT_EQ(backing().mapped_bytes(), 3 * g_);
  backing().unmap(base + g_, g_);  // the middle one alone
  EXPECT_EQ(backing().mapped_bytes(), 2 * g_);
  ASSERT_TRUE(backing().map(base + g_, g_));  // and back
  ASSERT_TRUE(backing().map(base + 3 * g_, g_));
  backing().unmap(base, 4 * g_);  // four granules mapped by three calls, unmapped by one
  EXPECT_EQ(backing().mapped_bytes(), 0u);
  backing().unreserve(base, 8 * g_);
}

TEST_P(BackingContract, WrongMapCallsThrowBeforeAnythingChanges) {
  const std::uintptr_t base = backing().reserve(4 * g_);
  ASSERT_NE(base, 0u);
  ASSERT_TRUE(backing().map(base, g_));
  EXPECT_THROW(backing().map(base, g_), std::logic_error) << "already mapped";
  EXPECT_THROW(backing().map(base + g_ / 2, g_), std::logic_error) << "misaligned";
  EXPECT_THROW(backing().map(base + g_, 0), std::logic_error) << "empty";
  EXPECT_THROW(backing().map(base + 3 * g_, 2 * g_), std::logic_error) << "runs past the reservation";
  EXPECT_THROW(backing().map(base + 64 * g_, g_), std::logic_error) << "outside every reservation";
  EXPECT_THROW(backing().reserve(0), std::logic_error);
  EXPECT_THROW(backing().reserve(g_ + 1), std::logic_error);
  try {
    backing().map(base, g_);
  } catch (const std::logic_error& error) {
    EXPECT_THAT(error.what(), HasSubstr("misused (a bug in plimsoll's engine)"));
  }
  EXPECT_EQ(backing().mapped_bytes(), g_) << "a refused call changes nothing";
  ASSERT_TRUE(backing().map(base + g_, 3 * g_)) << "the rest of the reservation is still free to map";
  backing().unmap(base, 4 * g_);
  backing().unreserve(base, 4 * g_);
}

TEST_P(BackingContract, RunningOutIsAllOrNothing) {
  if (!subject_->maps_can_run_out) {
    // The memory is taken at reserve(): more than the device has is refused there, and maps never fail.
    EXPECT_EQ(backing().reserve(2 * kCapacity), 0u);
    const std::uintptr_t base = backing().reserve(4 * g_);
    ASSERT_NE(base, 0u);
    EXPECT_TRUE(backing().map(base, 4 * g_));
    backing().unmap(base, 4 * g_);
    backing().unreserve(base, 4 * g_);
    return;
  }
  const std::uint64_t span = 2 * kCapacity;
  const std::uintptr_t base = backing().reserve(span);
  ASSERT_NE(base, 0u);
  ASSERT_TRUE(backing().map(base, 2 * g_));
  EXPECT_FALSE(backing().map(base + 2 * g_, kCapacity)) << "2 granules + the whole capacity cannot fit";
  EXPECT_EQ(backing().mapped_bytes(), 2 * g_) << "nothing of the refused map stays";
  ASSERT_TRUE(backing().map(base + 2 * g_, kCapacity - 2 * g_)) << "exactly the capacity fits";
  EXPECT_EQ(backing().mapped_bytes(), kCapacity);
  EXPECT_FALSE(backing().map(base + kCapacity, g_));
  backing().unmap(base, kCapacity);
  EXPECT_EQ(backing().mapped_bytes(), 0u);
  backing().unreserve(base, span);
}

TEST_P(BackingContract, ThreadsMayMapAndUnmapAtOnce) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 50;
  const std::uintptr_t base = backing().reserve(kThreads * 2 * g_);
  ASSERT_NE(base, 0u);
  std::vector<std::thread> threads;
  std::vector<int> mapped(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::uintptr_t mine = base + static_cast<std::uint64_t>(t) * 2 * g_;
      for (int round = 0; round < kRounds; ++round) {
        if (!backing().map(mine, 2 * g_)) continue;
        ++mapped[static_cast<std::size_t>(t)];
        backing().unmap(mine, g_);
        backing().unmap(mine + g_, g_);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int count : mapped) EXPECT_EQ(count, kRounds) << "4 x 2 granules fit in 64 MiB";
  EXPECT_EQ(backing().mapped_bytes(), 0u);
  backing().unreserve(base, kThreads * 2 * g_);
}

INSTANTIATE_TEST_SUITE_P(EveryBacking, BackingContract, ::testing::ValuesIn(kinds()), kind_name);

// ---- wrong unmap and unreserve calls abort (they are noexcept): the same rule for every backing ----

using BackingContractDeathTest = BackingContract;

TEST_P(BackingContractDeathTest, UnreserveWithGranulesStillMappedAborts) {
  const std::uintptr_t base = backing().reserve(4 * g_);
  ASSERT_NE(base, 0u);
  ASSERT_TRUE(backing().map(base + g_, g_));
  EXPECT_DEATH(backing().unreserve(base, 4 * g_), "unreserve of 0x[0-9a-f]+: [0-9]+ bytes inside are still mapped");
  backing().unmap(base + g_, g_);
  backing().unreserve(base, 4 * g_);
}

TEST_P(BackingContractDeathTest, UnmapOrUnreserveOfWhatIsNotThereAborts) {
  const std::uintptr_t base = backing().reserve(4 * g_);
  ASSERT_NE(base, 0u);
  ASSERT_TRUE(backing().map(base, g_));
  EXPECT_DEATH(backing().unmap(base + g_, g_), "not mapped");
  EXPECT_DEATH(backing().unmap(base, 2 * g_), "not mapped") << "only half of it is mapped";
  EXPECT_DEATH(backing().unreserve(base, 2 * g_), "reserved with");
  EXPECT_DEATH(backing().unreserve(base + g_, 3 * g_), "no reservation starts there");
  backing().unmap(base, g_);
  backing().unreserve(base, 4 * g_);
}

INSTANTIATE_TEST_SUITE_P(EveryBacking, BackingContractDeathTest, ::testing::ValuesIn(kinds()), kind_name);

}  // namespace
}  // namespace plimsoll::backings
