// A user's program built against the installed plimsoll (see CMakeLists.txt beside it): the C++ API and the C ABI,
// end to end. Prints every mismatch and exits non-zero if there was one.
#include <plimsoll/plimsoll.h>

#include <plimsoll/plimsoll.hpp>
#include <plimsoll/sharing.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <cstring>
#include <exception>
#include <string>

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "consumer: FAILED: %s\n", what.c_str());
    ++failures;
  }
}

std::uint64_t tag_bytes(const plimsoll::Stats& stats, const std::string& tag) {
  for (const plimsoll::TagStats& entry : stats.tags) {
    if (entry.tag == tag) return entry.in_use_bytes;
  }
  return 0;
}

void use_the_cpp_api() {
  constexpr std::uint64_t kMiB = 1024 * 1024;
  check(plimsoll::parse_size("1GiB") == 1024 * kMiB, "parse_size(\"1GiB\")");

  plimsoll::Config config;
  config.log_device_creation = false;
  plimsoll::Runtime runtime(config);
  plimsoll::Allocator& device = runtime.device("sim:1GiB");
  check(device.description().name == "sim:1GiB", "the device's name, got " + device.description().name);

  void* block = device.allocate(kMiB, "consumer");
  check(block != nullptr, "allocate returning memory");
  check(device.owns(block), "owns() of a live allocation");
  plimsoll::Stats stats = device.stats();
  check(stats.live_allocations == 1, "one live allocation, got " + std::to_string(stats.live_allocations));
  check(stats.requested_bytes == kMiB, "requested_bytes == 1 MiB, got " + std::to_string(stats.requested_bytes));
  check(stats.in_use_bytes >= kMiB, "in_use_bytes >= 1 MiB, got " + std::to_string(stats.in_use_bytes));
  check(tag_bytes(stats, "consumer") >= kMiB, "the tag \"consumer\" holding the allocation");

  const std::uint64_t too_large = 2 * 1024 * kMiB;  // more than the whole simulated device
  bool threw = false;
  try {
    void* never = device.allocate(too_large, "too-large");
    device.deallocate(never);
  } catch (const plimsoll::OutOfMemory& oom) {
    threw = true;
    check(oom.details().requested_bytes == too_large, "the OOM report's requested_bytes");
    check(oom.details().device == "sim:1GiB", "the OOM report naming the device, got " + oom.details().device);
    check(std::strstr(oom.what(), "sim:1GiB") != nullptr, "what() naming the device");
  }
  check(threw, "OutOfMemory for a request larger than the device");

  device.deallocate(block);
  stats = device.stats();
  check(stats.live_allocations == 0, "no live allocation after deallocate");
  check(stats.in_use_bytes == 0, "no bytes in use after deallocate");
  check(stats.ooms == 1, "one OOM counted, got " + std::to_string(stats.ooms));
  check(stats.frees == 1, "one free counted, got " + std::to_string(stats.frees));
}

// Everything a process sharing a GPU needs from sharing.hpp, from the installed headers alone: the header names no
// type that is not installed. The device's own pause and resume too.
void use_the_sharing_api() {
  constexpr std::uint64_t kMiB = 1024 * 1024;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("plimsoll-consumer-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    plimsoll::Config config;
    config.log_device_creation = false;
    plimsoll::Runtime runtime(config);
    plimsoll::Allocator& device = runtime.device("sim:1GiB");
    plimsoll::GpuShare share("GPU-00000000-0000-0000-0000-0000c0n5umer", 1024 * kMiB,
                             plimsoll::parse_share_spec("cuda:0=256MiB:512MiB"), dir.string());
    const plimsoll::TrimResponder responder(share, plimsoll::allocator_hooks(device), std::chrono::milliseconds(5));
    void* block = device.allocate(kMiB, "consumer");
    const auto paused = plimsoll::request_pause(::getpid(), false, std::chrono::seconds(20), dir.string());
    check(paused.size() == 1 && paused[0].done, "plimsoll pause of this process through the ledger");
    check(device.paused(), "the device paused by the request");
    const auto resumed = plimsoll::request_resume(::getpid(), std::chrono::seconds(20), dir.string());
    check(resumed.size() == 1 && resumed[0].done, "plimsoll resume of this process through the ledger");
    check(device.owns(block), "the allocation live at its address after resume");
    device.deallocate(block);
  }
  std::filesystem::remove_all(dir);
}

void use_the_c_abi() {
  plimsoll_device* device = nullptr;
  check(plimsoll_get_device("not-a-device", &device) == PLIMSOLL_INVALID_ARGUMENT,
        "plimsoll_get_device refusing a bad name");
  check(std::strstr(plimsoll_last_error(), "not-a-device") != nullptr,
        std::string("plimsoll_last_error naming the bad name, got: ") + plimsoll_last_error());
}

}  // namespace

int main() {
  try {
    use_the_cpp_api();
    use_the_sharing_api();
    use_the_c_abi();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "consumer: FAILED: unexpected exception: %s\n", error.what());
    return 1;
  }
  if (failures != 0) {
    std::fprintf(stderr, "consumer: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("consumer: plimsoll found, built against and used from an installed package: OK\n");
  return 0;
}
