// A Runtime's cuda:N devices under PLIMSOLL_SHARE (docs/sharing.md, "Runtime devices in the ledger"), on the
// in-process fake driver (tests/fake_cuda_driver.hpp): the device joins its GPU's ledger as an engine process with
// its in-use bytes, is trimmed when another process needs its share back, is paused and resumed by pid with its
// contents and addresses kept, shares one entry between two logical devices of one GPU, and takes the share (and
// cap) as its budget; a runtime without a share touches no ledger; bad specs and shares that do not fit are refused
// with the reason. With the driver interposer preloaded (the fake libcuda.so.1), the process keeps one entry,
// charged once.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fake_cuda_driver.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/sharing.hpp"
#include "runtime/runtime_access.hpp"
#include "sharing_support.hpp"
#include "sharing/ledger.hpp"
#include "sharing/ledger_file.hpp"
#include "sharing/ledger_snapshot.hpp"
#include "sharing/process_identity.hpp"

namespace {

using plimsoll::Allocator;
using plimsoll::Config;
using plimsoll::Runtime;
using plimsoll::fake_cuda::kMiB;
using testing::HasSubstr;
namespace sharing = plimsoll::sharing;

constexpr std::uint64_t kGpuBytes = 256 * kMiB;
constexpr const char* kFakeUuid = "GPU-fafafafa-fafa-fafa-fafa-fafafafafafa";  // the fake driver's UUID bytes
constexpr auto kPatience = std::chrono::seconds(20);  // a bound for a stuck test, never reached when it works

// A private ledger directory, set as PLIMSOLL_LEDGER_DIR for the test (each ctest case is its own process).
class LedgerDirectory {
 public:
  LedgerDirectory() {
    std::string pattern = ::testing::TempDir() + "plimsoll_runshare_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
    ::setenv("PLIMSOLL_LEDGER_DIR", path_.c_str(), 1);
  }
  ~LedgerDirectory() {
    ::unsetenv("PLIMSOLL_LEDGER_DIR");
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  LedgerDirectory(const LedgerDirectory&) = delete;
  LedgerDirectory& operator=(const LedgerDirectory&) = delete;
  const std::string& path() const { return path_; }
  std::string ledger() const { return sharing::ledger_path(path_, kFakeUuid); }
  bool empty() const { return std::filesystem::is_empty(path_); }

 private:
  std::string path_;
};

plimsoll::fake_cuda::Options fake_gpu() {
  plimsoll::fake_cuda::Options options;
  options.capacity_bytes = kGpuBytes;
  return options;
}

plimsoll::HostInfo fake_host() {
  plimsoll::HostInfo host;
  host.total_ram_bytes = std::uint64_t{16} << 30;
  host.available_ram_bytes = std::uint64_t{8} << 30;
  return host;
}

Config shared_config(std::optional<std::string> shares) {
  Config config;
  config.log_device_creation = false;
  config.gpu_shares = std::move(shares);
  return config;
}

std::unique_ptr<Runtime> runtime_on(const plimsoll::fake_cuda::Driver& driver, Config config) {
  auto runtime = std::make_unique<Runtime>(std::move(config));
  plimsoll::runtime::RuntimeAccess::inject_driver(*runtime, driver.api(), fake_host());
  return runtime;
}

std::vector<sharing::ProcessRow> entries_of(const std::string& ledger, int pid) {
  const auto file = sharing::LedgerFile::open_read_only(ledger);
  std::vector<sharing::ProcessRow> rows;
  for (const sharing::ProcessRow& row : sharing::read_snapshot(file).processes)
    if (row.pid == pid) rows.push_back(row);
  return rows;
}

sharing::ProcessRow my_entry(const LedgerDirectory& dir) {
  const auto rows = entries_of(dir.ledger(), ::getpid());
  if (rows.size() != 1) throw std::runtime_error("expected one ledger entry for this process, found " +
                                                 std::to_string(rows.size()));
  return rows.front();
}

// Polls until `done` holds (the responder answers within its 20 ms period) or kPatience passed.
bool eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return done();
}

template <typename Exception>
std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Exception& error) {
    return error.what();
  }
  return "no error of the expected type";
}

TEST(RuntimeShare, ACudaDeviceJoinsTheLedgerWithItsInUseBytesAndTakesItsCapAsItsGpu) {
  const LedgerDirectory dir;
  plimsoll::fake_cuda::Driver driver(fake_gpu());
  auto runtime = runtime_on(driver, shared_config("cuda:0=64MiB:128MiB"));
  Allocator& gpu = runtime->device("cuda:0");
  // The budget rule of any cuda device over the GPU as the share shows it: total = the cap (128 MiB), free = what
  // the ledger would charge (128 MiB), less the default reserve (a quarter of a GPU under 2 GiB: 32 MiB).
  EXPECT_EQ(gpu.description().total_bytes, 128 * kMiB);
  EXPECT_EQ(gpu.description().limit_bytes, 96 * kMiB);

  void* block = gpu.allocate(10 * kMiB);
  const sharing::ProcessRow joined = my_entry(dir);
  EXPECT_TRUE(joined.can_trim) << "an engine process: it gives cached memory back when asked";
  EXPECT_FALSE(joined.interposed);
  EXPECT_EQ(joined.share, 64 * kMiB);
  EXPECT_EQ(joined.cap, 128 * kMiB);
  EXPECT_EQ(joined.charged, driver.mapped_bytes()) << "every granule the heap mapped, charged once";
  EXPECT_GE(joined.charged, 10 * kMiB);
  EXPECT_TRUE(eventually([&] { return my_entry(dir).in_use == 10 * kMiB; }))
      << "in use: " << my_entry(dir).in_use << ", the responder writes the allocator's live bytes";

  // The cap binds: the budget (96 MiB) refuses first, and the ledger never holds more than the cap.
  EXPECT_EQ(gpu.try_allocate(120 * kMiB), nullptr);
  EXPECT_LE(my_entry(dir).charged, 128 * kMiB);
  gpu.deallocate(block);
  runtime.reset();
  EXPECT_TRUE(entries_of(dir.ledger(), ::getpid()).empty()) << "a destroyed runtime leaves the ledger";
}

const plimsoll::DeviceListing& listed(const std::vector<plimsoll::DeviceListing>& rows, const std::string& name) {
  for (const plimsoll::DeviceListing& row : rows)
    if (row.name == name) return row;
  throw std::runtime_error(name + " is not listed");
}

TEST(RuntimeShare, ListingPlansAGpuAgainstItsShareBeforeAndAfterItsDeviceIsCreated) {
  const LedgerDirectory dir;
  plimsoll::fake_cuda::Driver driver(fake_gpu());
  auto runtime = runtime_on(driver, shared_config("cuda:0=64MiB:128MiB"));
  // Not created yet: the budget rule over the GPU as the share shows it (the cap, 128 MiB, less the reserve of a
  // GPU under 2 GiB, a quarter: 96 MiB), not over the whole 256 MiB GPU. Listing joins no ledger.
  const plimsoll::DeviceListing before = listed(runtime->list_devices(), "cuda:0");
  EXPECT_EQ(before.total_bytes, 128 * kMiB);
  EXPECT_EQ(before.limit_bytes, 96 * kMiB);
  EXPECT_TRUE(dir.empty()) << "listing must not take a share";

  Allocator& gpu = runtime->device("cuda:0");
  EXPECT_EQ(gpu.description().limit_bytes, before.limit_bytes) << "created with the limit it was listed with";
  const plimsoll::DeviceListing after = listed(runtime->list_devices(), "cuda:0");
  EXPECT_EQ(after.total_bytes, 128 * kMiB);
  EXPECT_EQ(after.limit_bytes, 96 * kMiB);
}

TEST(RuntimeShare, ListingSaysWhyAShareCannotBeTaken) {
  const LedgerDirectory dir;
  plimsoll::fake_cuda::Driver driver(fake_gpu());
  {
    auto runtime = runtime_on(driver, shared_config("cuda:0=300MiB"));
    const plimsoll::DeviceListing row = listed(runtime->list_devices(), "cuda:0");
    EXPECT_THAT(row.details, HasSubstr("cannot be created: cuda:0 cannot join its GPU's shared ledger as cuda:0=300MiB"));
    EXPECT_EQ(row.limit_bytes, 0u);
  }
  {
    auto runtime = runtime_on(driver, shared_config("cuda:0=lots"));
    const std::vector<plimsoll::DeviceListing> rows = runtime->list_devices();
    EXPECT_THAT(listed(rows, "cuda:0").details, HasSubstr("PLIMSOLL_SHARE=\"cuda:0=lots\""));
    EXPECT_GT(listed(rows, "cpu").limit_bytes, 0u) << "the host is listed as before";
  }
  {
    // A share of another GPU leaves this one as the driver shows it.
    auto runtime = runtime_on(driver, shared_config("cuda:1=64MiB"));
    EXPECT_EQ(listed(runtime->list_devices(), "cuda:0").total_bytes, kGpuBytes);
  }
  EXPECT_TRUE(dir.empty());
}

TEST(RuntimeShare, ListingAGpuWhoseShareCannotBeTakenKeepsItsLogicalDevicesAndNotes) {
  const LedgerDirectory dir;
  plimsoll::fake_cuda::Driver driver(fake_gpu());
  {
    // A 300 MiB share of a 256 MiB GPU: the GPU and each of its configured logical devices are listed, each saying
    // why it cannot be created, with the sizes the config gives them.
    Config config = shared_config("cuda:0=300MiB");
    config.logical_devices["cuda:0"] = {plimsoll::LogicalDeviceConfig::sized(48 * kMiB),
                                        plimsoll::LogicalDeviceConfig::sized(32 * kMiB)};
    auto runtime = runtime_on(driver, std::move(config));
    const std::vector<plimsoll::DeviceListing> rows = runtime->list_devices();
    const std::string refusal = "cannot be created: cuda:0 cannot join its GPU's shared ledger as cuda:0=300MiB";
    EXPECT_THAT(listed(rows, "cuda:0").details, HasSubstr(refusal));
    EXPECT_THAT(listed(rows, "cuda:0").details, HasSubstr("split into 2 logical devices"));
    EXPECT_EQ(listed(rows, "cuda:0").limit_bytes, 80 * kMiB);
    EXPECT_THAT(listed(rows, "cuda:0/0").details, HasSubstr("logical device 0 of cuda:0"));
    EXPECT_THAT(listed(rows, "cuda:0/0").details, HasSubstr(refusal));
    EXPECT_EQ(listed(rows, "cuda:0/0").limit_bytes, 48 * kMiB);
    EXPECT_THAT(listed(rows, "cuda:0/1").details, HasSubstr(refusal));
    EXPECT_EQ(listed(rows, "cuda:0/1").limit_bytes, 32 * kMiB);
  }
  {
    // GPUs listed without a driver behind them: the refused row still says no driver can allocate from it.
    plimsoll::GpuScan scan;
    plimsoll::GpuInfo gpu;
    gpu.name = "Fake GPU";
    gpu.total_bytes = kGpuBytes;
    gpu.free_bytes = kGpuBytes;
    gpu.uuid = kFakeUuid;
    scan.gpus.push_back(gpu);
    Runtime runtime(shared_config("cuda:0=300MiB"));
    runtime.inject_hardware(std::move(scan), fake_host());
    const plimsoll::DeviceListing row = listed(runtime.list_devices(), "cuda:0");
    EXPECT_THAT(row.details, HasSubstr("cannot be created: cuda:0 cannot join its GPU's shared ledger"));
    EXPECT_THAT(row.details, HasSubstr("no CUDA driver is loaded"));
  }
  EXPECT_TRUE(dir.empty()) << "listing must not take a share";
}

TEST(RuntimeShare, ARuntimeWithoutAShareTouchesNoLedger) {
  const LedgerDirectory dir;
  plimsoll::fake_cuda::Driver driver(fake_gpu());
  auto runtime = runtime_on(driver, shared_config(std::nullopt));
  Allocator& gpu = runtime->device("cuda:0");
  void* block = gpu.allocate(10 * kMiB);
  EXPECT_EQ(gpu.description().total_bytes, kGpuBytes) << "the whole GPU, as before";
  gpu.deallocate(block);
  EXPECT_TRUE(dir.empty()) << "no ledger file was created";
}

TEST(RuntimeShare, AShareOfAnotherGpuLeavesThisOneOutOfTheLedger) {
  const LedgerDirectory dir;
  plimsoll::fake_cuda::Driver driver(fake_gpu());
  auto runtime = runtime_on(driver, shared_config("cuda:1=64MiB"));
  Allocator& gpu = runtime->device("cuda:0");
  gpu.deallocate(gpu.allocate(kMiB));
  EXPECT_TRUE(dir.empty());
}

TEST(RuntimeShare, TheEnvironmentVariableGivesTheShare) {
  const Config config = plimsoll::apply_environment(Config{}, [](const char* name) -> const char* {
    return std::strcmp(name, "PLIMSOLL_SHARE") == 0 ? "cuda:0=8GiB:16GiB" : nullptr;
  });
  ASSERT_TRUE(config.gpu_shares.has_value());
  EXPECT_EQ(*config.gpu_shares, "cuda:0=8GiB:16GiB");
  const Config unset = plimsoll::apply_environment(Config{}, [](const char*) -> const char* { return nullptr; });
  EXPECT_FALSE(unset.gpu_shares.has_value());
  const Config empty = plimsoll::apply_environment(Config{}, [](const char* name) -> const char* {
    return std::strcmp(name, "PLIMSOLL_SHARE") == 0 ? "" : nullptr;
  });
  EXPECT_FALSE(empty.gpu_shares.has_value()) << "an empty variable counts as unset";
}

TEST(RuntimeShare, BadSharesAreRefusedWithTheReasonAndNoLedgerIsJoined) {
  const LedgerDirectory dir;
  plimsoll::fake_cuda::Driver driver(fake_gpu());
  {
    auto runtime = runtime_on(driver, shared_config("cuda:0=lots"));
    const std::string error = error_of<plimsoll::InvalidArgument>([&] { runtime->device("cuda:0"); });
    EXPECT_THAT(error, HasSubstr("PLIMSOLL_SHARE=\"cuda:0=lots\""));
    EXPECT_THAT(error, HasSubstr("cuda:N=SHARE[:CAP]"));
    EXPECT_TRUE(dir.empty());
    // The host device does not need the GPU's share: it is still there.
    EXPECT_NO_THROW(runtime->device("cpu"));
  }
  {
    auto runtime = runtime_on(driver, shared_config("cuda:0=300MiB"));
    const std::string error = error_of<plimsoll::InvalidArgument>([&] { runtime->device("cuda:0"); });
    EXPECT_THAT(error, HasSubstr("cuda:0 cannot join its GPU's shared ledger as cuda:0=300MiB"));
  }
  {
    // The others' shares already promise the GPU: the device is refused, naming the share.
    const plimsoll::testing::LiveProcess other;  // a running process another ledger member can stand for
    sharing::Ledger ledger(sharing::LedgerFile::open_or_create(dir.path(), kFakeUuid, kGpuBytes));
    const int slot = ledger.join(sharing::Member{.who = other.identity(), .share = 200 * kMiB, .cap = 200 * kMiB,
                                                 .can_trim = false, .interposed = false, .command = "other"});
    auto runtime = runtime_on(driver, shared_config("cuda:0=100MiB"));
    const std::string error = error_of<plimsoll::Error>([&] { runtime->device("cuda:0"); });
    EXPECT_THAT(error, HasSubstr("cuda:0 cannot join its GPU's shared ledger"));
    EXPECT_THAT(error, HasSubstr("does not fit"));
    EXPECT_TRUE(entries_of(dir.ledger(), ::getpid()).empty());
    ledger.leave(slot);
  }
}

TEST(RuntimeShare, ItsCacheIsTrimmedWhenAnotherProcessNeedsItsShareBack) {
  const LedgerDirectory dir;
  plimsoll::fake_cuda::Driver driver(fake_gpu());
  Config config = shared_config("cuda:0=64MiB:224MiB");
  plimsoll::Policy policy;
  policy.reserve = 16 * kMiB;
  config.device_policies["cuda:0"] = policy;
  auto runtime = runtime_on(driver, config);
  Allocator& gpu = runtime->device("cuda:0");
  gpu.deallocate(gpu.allocate(150 * kMiB));  // cached: still mapped, still charged, 86 MiB borrowed
  const std::uint64_t cached = my_entry(dir).charged;
  ASSERT_GE(cached, 150 * kMiB);

  // Another process, within its 160 MiB share, needs 150 MiB: only this one's cache stands in the way.
  const plimsoll::testing::LiveProcess other;  // a running process another ledger member can stand for
  sharing::Ledger ledger(sharing::LedgerFile::open_or_create(dir.path(), kFakeUuid, kGpuBytes));
  const int slot = ledger.join(sharing::Member{.who = other.identity(), .share = 160 * kMiB, .cap = 160 * kMiB,
                                               .can_trim = false, .interposed = false, .command = "other"});
  const sharing::ChargeResult result =
      sharing::charge_waiting_for_trims(ledger, slot, 150 * kMiB, std::chrono::milliseconds(20000));
  EXPECT_EQ(result.verdict, sharing::Verdict::admitted) << "the responder trimmed the runtime's cache";
  const sharing::ProcessRow mine = my_entry(dir);
  EXPECT_GE(mine.trims, 1u);
  EXPECT_LT(mine.charged, cached);
  EXPECT_EQ(driver.mapped_bytes(), mine.charged) << "what was trimmed went back to the driver";
  ledger.release(slot, 150 * kMiB);
  ledger.leave(slot);
}

TEST(RuntimeShare, PauseAndResumeByPidKeepContentsAndAddresses) {
  const LedgerDirectory dir;
  plimsoll::fake_cuda::Driver driver(fake_gpu());
  auto runtime = runtime_on(driver, shared_config("cuda:0=64MiB:128MiB"));
  Allocator& gpu = runtime->device("cuda:0");
  auto* weights = static_cast<unsigned char*>(gpu.allocate(6 * kMiB));
  std::memset(weights, 0x5a, 6 * kMiB);
  ASSERT_GT(my_entry(dir).charged, 0u);

  const auto paused = plimsoll::request_pause(::getpid(), true, kPatience, dir.path());
  ASSERT_EQ(paused.size(), 1u);
  EXPECT_TRUE(paused[0].done) << paused[0].message;
  EXPECT_THAT(paused[0].message, HasSubstr("contents kept in host memory"));
  EXPECT_TRUE(gpu.paused());
  EXPECT_EQ(driver.mapped_bytes(), 0u);
  const sharing::ProcessRow while_paused = my_entry(dir);
  EXPECT_EQ(while_paused.charged, 0u) << "the ledger counts the paused memory free";
  EXPECT_TRUE(while_paused.paused);
  EXPECT_GT(while_paused.paused_bytes, 0u);

  const auto resumed = plimsoll::request_resume(::getpid(), kPatience, dir.path());
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_TRUE(resumed[0].done) << resumed[0].message;
  EXPECT_FALSE(gpu.paused());
  EXPECT_GT(my_entry(dir).charged, 0u);
  for (std::uint64_t i = 0; i < 6 * kMiB; i += 4093) ASSERT_EQ(weights[i], 0x5a) << "at byte " << i;
  gpu.deallocate(weights);

  // A resume with nothing paused is answered with the allocator's own refusal.
  const auto again = plimsoll::request_resume(::getpid(), kPatience, dir.path());
  ASSERT_EQ(again.size(), 1u);
  EXPECT_FALSE(again[0].done);
  EXPECT_TRUE(again[0].answered);
}

TEST(RuntimeShare, TwoLogicalDevicesOfOneGpuShareOneEntryAndPauseTogether) {
  const LedgerDirectory dir;
  plimsoll::fake_cuda::Driver driver(fake_gpu());
  Config config = shared_config("cuda:0=128MiB:192MiB");
  config.logical_devices["cuda:0"] = {plimsoll::LogicalDeviceConfig::sized(48 * kMiB),
                                      plimsoll::LogicalDeviceConfig::sized(48 * kMiB)};
  auto runtime = runtime_on(driver, config);
  Allocator& first = runtime->device("cuda:0/0");
  Allocator& second = runtime->device("cuda:0/1");
  void* a = first.allocate(4 * kMiB);
  void* b = second.allocate(6 * kMiB);
  EXPECT_EQ(my_entry(dir).charged, driver.mapped_bytes()) << "both devices charge the one entry (my_entry checks "
                                                             "there is exactly one)";
  EXPECT_TRUE(eventually([&] { return my_entry(dir).in_use == 10 * kMiB; })) << "in use adds up both devices";

  const auto paused = plimsoll::request_pause(::getpid(), false, kPatience, dir.path());
  ASSERT_EQ(paused.size(), 1u);
  EXPECT_TRUE(paused[0].done) << paused[0].message;
  EXPECT_TRUE(first.paused());
  EXPECT_TRUE(second.paused());
  EXPECT_EQ(my_entry(dir).charged, 0u);
  const auto resumed = plimsoll::request_resume(::getpid(), kPatience, dir.path());
  EXPECT_TRUE(resumed.at(0).done) << resumed.at(0).message;
  EXPECT_FALSE(first.paused());
  EXPECT_FALSE(second.paused());
  first.deallocate(a);
  second.deallocate(b);
}

// A GPU's devices pause together or not at all: one that cannot pause (preallocated) is found before any is paused,
// since a device paused without its contents and resumed by the rollback would go on over fresh, undefined memory.
TEST(RuntimeShare, APauseOneDeviceOfTheGpuCannotTakePausesNone) {
  const LedgerDirectory dir;
  plimsoll::fake_cuda::Driver driver(fake_gpu());
  Config config = shared_config("cuda:0=128MiB:192MiB");
  config.logical_devices["cuda:0"] = {plimsoll::LogicalDeviceConfig::sized(48 * kMiB),
                                      plimsoll::LogicalDeviceConfig::sized(48 * kMiB)};
  config.device_policies["cuda:0/1"].growth = plimsoll::Growth::preallocate;
  auto runtime = runtime_on(driver, config);
  Allocator& first = runtime->device("cuda:0/0");
  Allocator& second = runtime->device("cuda:0/1");
  void* a = first.allocate(4 * kMiB);
  const auto paused = plimsoll::request_pause(::getpid(), false, kPatience, dir.path());
  ASSERT_EQ(paused.size(), 1u);
  EXPECT_FALSE(paused[0].done);
  EXPECT_THAT(paused[0].message, HasSubstr("cuda:0/1"));
  EXPECT_THAT(paused[0].message, HasSubstr("preallocated"));
  EXPECT_FALSE(first.paused()) << "the device that could pause was never paused";
  EXPECT_FALSE(second.paused());
  EXPECT_GT(my_entry(dir).charged, 0u);
  first.deallocate(a);
}

// A GPU's first device that fails after joining the ledger (here a limit over the share's cap) leaves it again: an
// entry with no device would keep the share promised to a process that answers nothing.
TEST(RuntimeShare, AFirstDeviceThatFailsLeavesTheLedger) {
  const LedgerDirectory dir;
  plimsoll::fake_cuda::Driver driver(fake_gpu());
  Config config = shared_config("cuda:0=64MiB:96MiB");
  config.device_policies["cuda:0"].memory_limit = 200 * kMiB;
  auto runtime = runtime_on(driver, config);
  EXPECT_THROW(runtime->device("cuda:0"), plimsoll::Error);
  EXPECT_TRUE(entries_of(dir.ledger(), ::getpid()).empty()) << "the failed device's process is still in the ledger";
  // With a limit that fits, the same runtime joins again.
  runtime->configure("cuda:0", plimsoll::Policy{});
  EXPECT_NO_THROW(runtime->device("cuda:0"));
  EXPECT_EQ(entries_of(dir.ledger(), ::getpid()).size(), 1u);
}

TEST(RuntimeShare, ADevicePausedByItselfShowsPausedInTheLedger) {
  const LedgerDirectory dir;
  plimsoll::fake_cuda::Driver driver(fake_gpu());
  auto runtime = runtime_on(driver, shared_config("cuda:0=64MiB"));
  Allocator& gpu = runtime->device("cuda:0");
  void* block = gpu.allocate(4 * kMiB);
  const std::uint64_t given_back = gpu.pause();
  EXPECT_TRUE(eventually([&] { return my_entry(dir).paused; }));
  EXPECT_EQ(my_entry(dir).paused_bytes, given_back);
  gpu.resume();
  EXPECT_TRUE(eventually([&] { return !my_entry(dir).paused; }));
  gpu.deallocate(block);
}

// The client program (tests/fake_libcuda/runtime_client.cpp) over the fake libcuda.so.1, with `environment` added.
using ClientRun = plimsoll::testing::ProgramRun;
using Environment = std::map<std::string, std::string>;

ClientRun run_client(const std::vector<std::string>& argv, const Environment& environment) {
  return plimsoll::testing::run_program(argv, environment);
}

Environment fake_gpu_environment(const LedgerDirectory& dir) {
  return {{"LD_LIBRARY_PATH", PLIMSOLL_FAKE_LIBCUDA_DIR},
          {"PLIMSOLL_FAKE_CUDA_BYTES", std::to_string(kGpuBytes)},
          {"PLIMSOLL_LEDGER_DIR", dir.path()},
          {"PLIMSOLL_SHARE", "cuda:0=64MiB:128MiB"},
          {"PLIMSOLL_LOG", "0"}};
}

std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> found;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (line.rfind(prefix, 0) == 0) found.push_back(line);
    start = end + 1;
  }
  return found;
}

// The client runs with and without plimsoll's interposer preloaded, sanitized builds included: ASan looks its
// interceptors up with dlsym(RTLD_NEXT, ...) while it starts, which the interposer's dlsym answers without opening
// or allocating anything (src/integrations/cuda_intercept/elf_lookup.cpp); the fake driver's types match its callers'
// (UBSan's -fsanitize=function).
// Runs the client over the fake driver with `preload` (may be empty) and checks that its Runtime joined the ledger
// itself: one entry, an engine process's (which plimsoll pause reaches), charged with the device's limit (the fake
// libcuda.so.1 has no virtual memory management: the device takes its whole limit at once, with cuMemAlloc).
void expect_the_runtime_joined_itself(const std::string& preload) {
  const LedgerDirectory dir;
  auto environment = fake_gpu_environment(dir);
  if (!preload.empty()) environment["LD_PRELOAD"] = preload;
  const ClientRun run = run_client({PLIMSOLL_RUNTIME_CLIENT, "cuda:0", "8MiB"}, environment);
  ASSERT_EQ(run.status, 0) << run.err;
  const auto entries = lines_starting(run.out, "entry ");
  ASSERT_EQ(entries.size(), 1u) << "the Runtime's own entry:\n" << run.out;
  EXPECT_THAT(entries[0], HasSubstr("interposed=0 can_trim=1"));
  const auto limit = lines_starting(run.out, "limit ");
  ASSERT_EQ(limit.size(), 1u);
  EXPECT_THAT(entries[0], HasSubstr("charged=" + limit[0].substr(6) + " ")) << run.out;
}

TEST(RuntimeShare, AProcessGetsItsShareFromTheEnvironmentWithoutTheInterposer) {
  expect_the_runtime_joined_itself("");
}

TEST(RuntimeShare, UnderTheInterposerTheProcessKeepsOneEntryChargedOnce) {
  // `plimsoll run --device cuda:0=SHARE:CAP` preloads the interposer and sets PLIMSOLL_SHARE; the PyTorch library's
  // Runtime device then allocates through the interposer, which charges it: the Runtime does not join again.
  const LedgerDirectory dir;
  auto environment = fake_gpu_environment(dir);
  environment["LD_PRELOAD"] = PLIMSOLL_CUDA_INTERCEPT_SO;
  const ClientRun run = run_client({PLIMSOLL_RUNTIME_CLIENT, "cuda:0", "8MiB"}, environment);
  ASSERT_EQ(run.status, 0) << run.err;
  const auto entries = lines_starting(run.out, "entry ");
  ASSERT_EQ(entries.size(), 1u) << "one entry per process and GPU:\n" << run.out;
  EXPECT_THAT(entries[0], HasSubstr("interposed=1 can_trim=0"));
  const auto limit = lines_starting(run.out, "limit ");
  ASSERT_EQ(limit.size(), 1u);
  // The device's preallocated region, charged once by the interposer (the fake's context costs nothing) as the
  // driver gave it: the limit, plus the granule a misaligned cuMemAlloc is retried with
  // (backings/cuda_region_backing.cpp). Charged twice, it would be twice the limit.
  const std::uint64_t region = std::stoull(limit[0].substr(6));
  const std::uint64_t charged = std::stoull(entries[0].substr(entries[0].find("charged=") + 8));
  EXPECT_GE(charged, region) << run.out;
  EXPECT_LE(charged, region + 2 * kMiB) << run.out;
  EXPECT_LE(region, 128 * kMiB) << "the interposer's cuMemGetInfo says the cap";
}

TEST(RuntimeShare, AnotherShimWrappingTheDriverIsNotTakenForTheInterposer) {
  // A shim of someone else's (HAMi-core, a profiler) wraps cuMemAlloc_v2 and cuMemCreate but charges no ledger: the
  // Runtime must join the ledger itself, or the process would run ungoverned.
  expect_the_runtime_joined_itself(PLIMSOLL_FOREIGN_CUDA_SHIM);
}

TEST(RuntimeShare, AForeignShimBeforeTheInterposerIsNotTakenForIt) {
  // Both preloaded, the foreign shim first: plimsoll's marker is loaded, but the driver's allocation calls bind to the
  // foreign shim (which charges nothing), so the Runtime must join the ledger itself.
  expect_the_runtime_joined_itself(std::string(PLIMSOLL_FOREIGN_CUDA_SHIM) + " " + PLIMSOLL_CUDA_INTERCEPT_SO);
}

// The client holding its memory (its last argument `hold`) until destroyed, for `plimsoll pause PID`.
class HeldClient {
 public:
  HeldClient(const std::vector<std::string>& argv, const Environment& environment) {
    int in_pipe[2], out_pipe[2];
    if (::pipe(in_pipe) != 0 || ::pipe(out_pipe) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      for (const auto& [name, value] : environment) ::setenv(name.c_str(), value.c_str(), 1);
      ::dup2(in_pipe[0], 0);
      ::dup2(out_pipe[1], 1);
      ::close(in_pipe[1]);
      std::vector<char*> args;
      for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(in_pipe[0]);
    ::close(out_pipe[1]);
    stdin_ = in_pipe[1];
    stdout_ = out_pipe[0];
    // Up to "holding" (or the end, when it failed).
    char c = 0;
    while (out_.find("holding\n") == std::string::npos && ::read(stdout_, &c, 1) == 1) out_ += c;
  }
  ~HeldClient() {
    ::close(stdin_);
    ::close(stdout_);
    ::waitpid(pid_, nullptr, 0);
  }
  HeldClient(const HeldClient&) = delete;
  HeldClient& operator=(const HeldClient&) = delete;
  int pid() const { return pid_; }
  bool holding() const { return out_.find("holding\n") != std::string::npos; }
  const std::string& out() const { return out_; }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
  std::string out_;
};

TEST(RuntimeShare, PlimsollPauseReachesARuntimeProcessButNotOneUnderTheInterposer) {
  const LedgerDirectory dir;
  const std::vector<std::string> client = {PLIMSOLL_RUNTIME_CLIENT, "cuda:0", "8MiB", "hold"};
  {
    const HeldClient engine(client, fake_gpu_environment(dir));
    ASSERT_TRUE(engine.holding()) << engine.out();
    // Answered by the process's responder: the fake libcuda.so.1 has no virtual memory management, so its device
    // is preallocated and refuses the pause with its reason (exit 1), where an ungoverned process gets exit 2.
    const ClientRun pause =
        run_client({PLIMSOLL_CLI_PATH, "pause", std::to_string(engine.pid()), "--ledger-dir", dir.path()}, {});
    EXPECT_EQ(pause.status, 1) << pause.out << pause.err;
    EXPECT_THAT(pause.out + pause.err, HasSubstr("preallocate"));
  }
  {
    auto environment = fake_gpu_environment(dir);
    environment["LD_PRELOAD"] = PLIMSOLL_CUDA_INTERCEPT_SO;
    const HeldClient interposed(client, environment);
    ASSERT_TRUE(interposed.holding()) << interposed.out();
    const ClientRun pause =
        run_client({PLIMSOLL_CLI_PATH, "pause", std::to_string(interposed.pid()), "--ledger-dir", dir.path()}, {});
    EXPECT_EQ(pause.status, 2) << pause.out << pause.err;
    EXPECT_THAT(pause.err, HasSubstr("driver"));
  }
}

}  // namespace
