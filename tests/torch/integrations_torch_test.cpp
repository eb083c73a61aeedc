// plimsoll as libtorch's CPU allocator (plimsoll_torch). C++17, like libtorch. gtest_discover_tests runs each test
// in its own process, so each installs plimsoll afresh; devices come from devices.hpp.
#include <condition_variable>
#include <cstdint>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include "devices.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/torch.hpp"
#include "plimsoll/torch_error.hpp"

namespace {

namespace pt = plimsoll::torch;
using plimsoll::torch_test::main_device;
using plimsoll::torch_test::other_device;
using plimsoll::torch_test::small_device;
using plimsoll::torch_test::tag_in_use;
using plimsoll::torch_test::usage;
using plimsoll::torch_test::Usage;

constexpr std::int64_t kFloats = 64 * 1024;  // 256 KiB of float32
constexpr std::uint64_t kBytes = kFloats * sizeof(float);

class TorchCpuAllocator : public ::testing::Test {
 protected:
  void SetUp() override {
    pt::install(main_device());
    ASSERT_TRUE(pt::installed());
  }
};

TEST_F(TorchCpuAllocator, TensorsComeFromPlimsollAndReturnToIt) {
  const Usage before = usage(main_device());
  torch::Tensor t = torch::empty({kFloats}, torch::kFloat32);
  const Usage during = usage(main_device());
  EXPECT_EQ(during.requested_bytes - before.requested_bytes, kBytes);
  EXPECT_GE(during.in_use_bytes - before.in_use_bytes, kBytes);
  EXPECT_EQ(during.live_allocations, before.live_allocations + 1);
  EXPECT_TRUE(plimsoll::torch_test::owns(main_device(), t.data_ptr()));
  t = torch::Tensor();
  const Usage after = usage(main_device());
  EXPECT_EQ(after.in_use_bytes, before.in_use_bytes);
  EXPECT_EQ(after.live_allocations, before.live_allocations);
}

TEST_F(TorchCpuAllocator, AllocateZeroWorks) {
  const Usage before = usage(main_device());
  c10::Allocator* allocator = c10::GetAllocator(c10::DeviceType::CPU);
  {
    c10::DataPtr empty = allocator->allocate(0);
    EXPECT_EQ(empty.device().type(), c10::DeviceType::CPU);
    EXPECT_EQ(usage(main_device()).live_allocations, before.live_allocations + 1);
  }
  EXPECT_EQ(usage(main_device()).live_allocations, before.live_allocations);
  torch::Tensor none = torch::empty({0}, torch::kFloat32);
  EXPECT_EQ(none.numel(), 0);
  none = torch::Tensor();
  EXPECT_EQ(usage(main_device()).in_use_bytes, before.in_use_bytes);
}

TEST_F(TorchCpuAllocator, RawAllocateIsAlignedAndRawDeallocateFrees) {
  const Usage before = usage(main_device());
  c10::Allocator* allocator = c10::GetAllocator(c10::DeviceType::CPU);
  ASSERT_NE(allocator->raw_deleter(), nullptr);
  std::vector<void*> blocks;
  for (std::size_t bytes : {std::size_t{1}, std::size_t{3}, std::size_t{65}, std::size_t{1000}, std::size_t{4097}}) {
    void* p = allocator->raw_allocate(bytes);  // asserts that the context is the data pointer
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0U) << bytes << " bytes";
    blocks.push_back(p);
  }
  EXPECT_EQ(usage(main_device()).live_allocations, before.live_allocations + blocks.size());
  for (void* p : blocks) allocator->raw_deallocate(p);
  EXPECT_EQ(usage(main_device()).live_allocations, before.live_allocations);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(torch::empty({3}, torch::kUInt8).data_ptr()) % 64, 0U);
}

TEST_F(TorchCpuAllocator, DeviceScopeRoutesAndTheTensorIsFreedIntoItsDeviceAnywhere) {
  const Usage main_before = usage(main_device());
  const Usage other_before = usage(other_device());
  torch::Tensor freed_outside;
  torch::Tensor freed_on_thread;
  {
    pt::DeviceScope on_other(other_device());
    EXPECT_EQ(pt::current_device(), &other_device());
    freed_outside = torch::ones({kFloats}, torch::kFloat32);
    freed_on_thread = torch::ones({kFloats}, torch::kFloat32);
  }
  EXPECT_EQ(pt::current_device(), &main_device());
  EXPECT_EQ(usage(other_device()).requested_bytes - other_before.requested_bytes, 2 * kBytes);
  EXPECT_EQ(usage(main_device()).requested_bytes, main_before.requested_bytes);

  freed_outside = torch::Tensor();  // outside the scope: still freed into other_device
  std::thread([t = std::move(freed_on_thread)]() mutable { t = torch::Tensor(); }).join();
  EXPECT_EQ(usage(other_device()).in_use_bytes, other_before.in_use_bytes);
  EXPECT_EQ(usage(other_device()).live_allocations, other_before.live_allocations);
  EXPECT_EQ(usage(main_device()).in_use_bytes, main_before.in_use_bytes);
}

TEST_F(TorchCpuAllocator, TagsShowUpInPerTagStats) {
  torch::Tensor weights;
  torch::Tensor gradients;
  {
    pt::TagScope tag(pt::tags::weights);
    EXPECT_EQ(pt::current_tag(), "weights");
    weights = torch::zeros({kFloats}, torch::kFloat32);
    {
      pt::TagScope inner(pt::tags::gradients);
      gradients = torch::zeros({2 * kFloats}, torch::kFloat32);
    }
    EXPECT_EQ(pt::current_tag(), "weights");
  }
  EXPECT_EQ(pt::current_tag(), "");
  EXPECT_GE(tag_in_use(main_device(), "weights"), kBytes);
  EXPECT_GE(tag_in_use(main_device(), "gradients"), 2 * kBytes);
  weights = torch::Tensor();
  gradients = torch::Tensor();
  EXPECT_EQ(tag_in_use(main_device(), "weights"), 0U);
  EXPECT_EQ(tag_in_use(main_device(), "gradients"), 0U);
}

// What docs/torch.md promises for libtorch's worker threads: they have no scope of their own, so they follow the
// caller's DeviceScope and TagScope, the only ones open in the process; the calling thread's chunks see them anyway.
TEST_F(TorchCpuAllocator, ParallelForWorkersFollowTheCallersScopes) {
  at::set_num_threads(4);
  constexpr std::int64_t kChunks = 16;
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<torch::Tensor> tensors(kChunks);
  std::vector<char> on_caller(kChunks, 0);
  const Usage main_before = usage(main_device());
  const Usage other_before = usage(other_device());
  {
    pt::DeviceScope on_other(other_device());
    pt::TagScope tagged(pt::tags::activations);
    at::parallel_for(0, kChunks, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        on_caller[static_cast<std::size_t>(i)] = std::this_thread::get_id() == caller ? 1 : 0;
        tensors[static_cast<std::size_t>(i)] = torch::empty({kFloats}, torch::kFloat32);
      }
    });
  }
  std::uint64_t caller_chunks = 0;
  for (char c : on_caller) caller_chunks += c != 0 ? 1U : 0U;
  std::cout << caller_chunks << " chunks on the calling thread, " << kChunks - caller_chunks << " on workers\n";
  EXPECT_LT(caller_chunks, static_cast<std::uint64_t>(kChunks)) << "no worker ran a chunk: nothing was tested";
  EXPECT_EQ(usage(other_device()).requested_bytes - other_before.requested_bytes, kChunks * kBytes);
  EXPECT_EQ(usage(main_device()).requested_bytes, main_before.requested_bytes);
  EXPECT_GE(tag_in_use(other_device(), "activations"), kChunks * kBytes);
  tensors.clear();
  EXPECT_EQ(usage(other_device()).in_use_bytes, other_before.in_use_bytes);
}

// When scoped threads disagree (two replicas on two devices), a thread without a scope cannot know whose work it
// does: it takes the default device, untagged; with one scope left, it follows that one again.
TEST_F(TorchCpuAllocator, ThreadsWithoutAScopeTakeTheDefaultWhenScopedThreadsDisagree) {
  std::mutex mutex;
  std::condition_variable changed;
  int stage = 0;  // 1: the helper holds its scope; 2: the helper may close it; 3: closed
  std::thread helper([&] {
    {
      pt::DeviceScope on_small(small_device());
      std::unique_lock<std::mutex> lock(mutex);
      stage = 1;
      changed.notify_all();
      changed.wait(lock, [&] { return stage == 2; });
    }
    std::lock_guard<std::mutex> lock(mutex);
    stage = 3;
    changed.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return stage == 1; });
  }
  pt::DeviceScope on_other(other_device());
  plimsoll::Allocator* seen_by_unscoped = nullptr;
  std::thread([&] { seen_by_unscoped = pt::current_device(); }).join();
  EXPECT_EQ(seen_by_unscoped, &main_device());  // cpu/1 here and cpu/2 on the helper: the default
  {
    std::lock_guard<std::mutex> lock(mutex);
    stage = 2;
    changed.notify_all();
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return stage == 3; });
  }
  helper.join();
  std::thread([&] { seen_by_unscoped = pt::current_device(); }).join();
  EXPECT_EQ(seen_by_unscoped, &other_device());  // only this thread's scope is left: followed
}

TEST_F(TorchCpuAllocator, LinearAndConvTrainThroughPlimsoll) {
  torch::manual_seed(0);
  const Usage before = usage(main_device());
  {
    pt::TagScope weights(pt::tags::weights);
    torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 8, 3).padding(1));
    torch::nn::Linear linear(8 * 16 * 16, 10);
    EXPECT_TRUE(plimsoll::torch_test::owns(main_device(), conv->weight.data_ptr()));
    EXPECT_GE(tag_in_use(main_device(), "weights"), sizeof(float) * (8 * 3 * 3 * 3 + 8 * 16 * 16 * 10));

    torch::Tensor input;
    {
      pt::TagScope batches(pt::tags::batches);
      input = torch::randn({4, 3, 16, 16});
    }
    torch::Tensor loss;
    {
      pt::TagScope activations(pt::tags::activations);
      torch::Tensor hidden = torch::relu(conv->forward(input));
      loss = linear->forward(hidden.flatten(1)).logsumexp(1).mean();
    }
    {
      pt::TagScope gradients(pt::tags::gradients);
      loss.backward();
    }
    ASSERT_TRUE(conv->weight.grad().defined());
    EXPECT_TRUE(plimsoll::torch_test::owns(main_device(), conv->weight.grad().data_ptr()));
    EXPECT_TRUE(plimsoll::torch_test::owns(main_device(), linear->weight.grad().data_ptr()));
    EXPECT_GT(tag_in_use(main_device(), "gradients"), 0U);
    EXPECT_GT(tag_in_use(main_device(), "batches"), 0U);
    EXPECT_GT(usage(main_device()).live_allocations, before.live_allocations);
  }
  EXPECT_EQ(usage(main_device()).live_allocations, before.live_allocations);
  EXPECT_EQ(usage(main_device()).in_use_bytes, before.in_use_bytes);
}

TEST_F(TorchCpuAllocator, TooSmallALimitGivesPlimsollsOutOfMemoryReport) {
  pt::DeviceScope on_small(small_device());
  const Usage before = usage(small_device());
  try {
    torch::Tensor too_big = torch::empty({static_cast<std::int64_t>(plimsoll::torch_test::kSmallLimit)},
                                         torch::kFloat32);
    FAIL() << "32 MiB fit in an 8 MiB device";
  } catch (const c10::OutOfMemoryError& e) {
    // PyTorch raises c10's OutOfMemoryError as torch.cuda.OutOfMemoryError: a host OOM must not be one.
    FAIL() << "a host out-of-memory surfaced as c10::OutOfMemoryError: " << e.msg();
  } catch (const pt::HostOutOfMemoryError& e) {
    const std::string message = e.msg();
    EXPECT_NE(message.find("plimsoll: out of memory on cpu/2"), std::string::npos) << message;
    EXPECT_NE(message.find("limit"), std::string::npos) << message;
    EXPECT_EQ(std::string(e.what_without_backtrace()).find("plimsoll: out of memory on cpu/2"), 0U);
  }
  EXPECT_EQ(usage(small_device()).ooms, before.ooms + 1);
  torch::Tensor fits = torch::ones({kFloats}, torch::kFloat32);  // the device still works
  EXPECT_EQ(fits.sum().item<float>(), static_cast<float>(kFloats));
}

TEST_F(TorchCpuAllocator, UninstallPutsLibtorchsAllocatorBackAndOldTensorsStillFreeIntoPlimsoll) {
  const Usage before = usage(main_device());
  torch::Tensor ours = torch::empty({kFloats}, torch::kFloat32);
  pt::uninstall();
  EXPECT_FALSE(pt::installed());
  torch::Tensor theirs = torch::empty({kFloats}, torch::kFloat32);
  EXPECT_FALSE(plimsoll::torch_test::owns(main_device(), theirs.data_ptr()));
  EXPECT_EQ(usage(main_device()).live_allocations, before.live_allocations + 1);
  ours = torch::Tensor();
  EXPECT_EQ(usage(main_device()).live_allocations, before.live_allocations);
  pt::install(main_device());
  EXPECT_TRUE(plimsoll::torch_test::owns(main_device(), torch::empty({1}).data_ptr()));
}

TEST_F(TorchCpuAllocator, ThreadsAllocatingAndFreeingAcrossDevicesLeaveNothingBehind) {
  const Usage main_before = usage(main_device());
  const Usage other_before = usage(other_device());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      std::vector<torch::Tensor> kept;
      for (int i = 0; i < 200; ++i) {
        pt::DeviceScope scope((i + t) % 2 == 0 ? main_device() : other_device());
        kept.push_back(torch::empty({(i % 7 + 1) * 1024}, torch::kFloat32));
        if (kept.size() > 5) kept.erase(kept.begin());  // freed outside the scope that made it, often
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(usage(main_device()).live_allocations, main_before.live_allocations);
  EXPECT_EQ(usage(other_device()).live_allocations, other_before.live_allocations);
  EXPECT_EQ(usage(main_device()).in_use_bytes, main_before.in_use_bytes);
  EXPECT_EQ(usage(other_device()).in_use_bytes, other_before.in_use_bytes);
}

// The overloads by name use Runtime::global(); devices whose memory is not host memory are refused.
TEST(TorchCpuAllocatorByName, InstallsOnAGlobalDeviceAndRefusesNonHostDevices) {
  pt::install("cpu");
  torch::Tensor t = torch::ones({kFloats}, torch::kFloat32);
  {
    pt::DeviceScope same("cpu");
    t = t + 1;
  }
  EXPECT_EQ(t.sum().item<float>(), 2.0F * static_cast<float>(kFloats));
  EXPECT_THROW(pt::DeviceScope("sim:1GiB"), plimsoll::InvalidArgument);
  EXPECT_THROW(pt::install("sim:1GiB"), plimsoll::InvalidArgument);
  EXPECT_NE(pt::current_device(), nullptr);
}

// PyTorch's profiler with memory profiling on sees plimsoll's CPU allocations and frees, with their sizes, as it
// sees DefaultCPUAllocator's.
TEST_F(TorchCpuAllocator, ProfilerWithMemoryProfilingSeesTheCpuBytes) {
  namespace profiler = torch::autograd::profiler;
  profiler::enableProfilerLegacy(profiler::ProfilerConfig(profiler::ProfilerState::CPU, /*report_input_shapes=*/false,
                                                          /*profile_memory=*/true));
  {
    torch::Tensor t = torch::empty({kFloats}, torch::kFloat32);
    EXPECT_TRUE(plimsoll::torch_test::owns(main_device(), t.data_ptr()));
  }
  const profiler::thread_event_lists events = profiler::disableProfilerLegacy();
  std::int64_t allocated = 0;
  std::int64_t freed = 0;
  for (const auto& thread_events : events) {
    for (const auto& event : thread_events) {
      if (event.kind() != profiler::EventKind::MemoryAlloc) continue;
      if (event.cpuMemoryUsage() == static_cast<std::int64_t>(kBytes)) ++allocated;
      if (event.cpuMemoryUsage() == -static_cast<std::int64_t>(kBytes)) ++freed;
    }
  }
  EXPECT_EQ(allocated, 1);
  EXPECT_EQ(freed, 1);
}

// Without a profiler listening, nothing is reported and nothing changes (the common case pays one check).
TEST_F(TorchCpuAllocator, NoProfilerNoReports) {
  EXPECT_FALSE(c10::memoryProfilingEnabled());
  torch::Tensor t = torch::ones({kFloats}, torch::kFloat32);
  EXPECT_EQ(t.sum().item<float>(), static_cast<float>(kFloats));
}

// A library that installs its own CPU allocator after plimsoll, with a higher priority, is noticed and named.
class OtherCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) const override {
    void* ptr = c10::GetDefaultCPUAllocator()->raw_allocate(bytes);
    return {ptr, ptr, &free_it, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_it; }

 private:
  static void free_it(void* ptr) { c10::GetDefaultCPUAllocator()->raw_deallocate(ptr); }
};

TEST_F(TorchCpuAllocator, AnotherAllocatorInstalledLaterWithAHigherPriorityIsDetected) {
  EXPECT_FALSE(pt::installed_allocator_overridden());
  EXPECT_EQ(pt::allocator_report_line(), "");
  static OtherCpuAllocator other;  // c10 keeps the pointer: static lifetime
  c10::SetAllocator(c10::DeviceType::CPU, &other, 100);
  EXPECT_TRUE(pt::installed());
  EXPECT_TRUE(pt::installed_allocator_overridden());
  EXPECT_NE(pt::allocator_report_line().find("another CPU allocator replaced plimsoll's"), std::string::npos);
  torch::Tensor bypassing = torch::empty({kFloats}, torch::kFloat32);
  EXPECT_FALSE(plimsoll::torch_test::owns(main_device(), bypassing.data_ptr()));

  // A lower priority than the other library's cannot take the place back, and says so; a higher one does.
  EXPECT_THROW(pt::install(main_device(), 50), plimsoll::InvalidState);
  pt::install(main_device(), 200);
  EXPECT_FALSE(pt::installed_allocator_overridden());
  EXPECT_EQ(pt::allocator_report_line(), "");
  torch::Tensor ours = torch::empty({kFloats}, torch::kFloat32);
  EXPECT_TRUE(plimsoll::torch_test::owns(main_device(), ours.data_ptr()));
}

}  // namespace
