// The pipeline's buffer pool (src/pipeline/batch_buffer_pool.hpp) on its own: a parked buffer outlives the pool's
// owner until its copy is done, so the next pipeline cannot get it while a host-to-device copy still reads it.
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

#include "pipeline/batch_buffer_pool.hpp"

namespace plimsoll::pipeline_detail {
namespace {

TEST(BatchBufferPool, DestroyingThePoolWaitsForEveryParkedCopy) {
  std::atomic<bool> copied{false};
  std::thread copier;
  {
    BatchBufferPool pool(4096, 2);
    Buffer* buffer = pool.try_acquire();
    ASSERT_NE(buffer, nullptr);
    pool.park(buffer, [&copied] { return copied.load(); });
    copier = std::thread([&copied] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      copied = true;
    });
  }  // the pool frees its buffers here: only once the copy said it is done
  EXPECT_TRUE(copied.load()) << "the buffer was freed while its copy was still in flight";
  copier.join();
}

TEST(BatchBufferPool, ACopyDoneThatThrowsDoesNotStopTheTeardown) {
  BatchBufferPool pool(4096, 1);
  Buffer* buffer = pool.try_acquire();
  ASSERT_NE(buffer, nullptr);
  pool.park(buffer, []() -> bool { throw std::runtime_error("the stream is gone"); });
}

}  // namespace
}  // namespace plimsoll::pipeline_detail
