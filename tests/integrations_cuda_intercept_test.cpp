// libplimsoll_cuda_intercept.so preloaded in front of the fake libcuda.so.1 (tests/fake_libcuda), in client
// processes that reach the driver by name, through dlsym and through cuGetProcAddress: budgets and refusals with
// the one-time report, cuMemGetInfo / cuDeviceTotalMem answering the budget, the context's cost, every allocation
// kind charged, bad configuration and ledgers refused with the reason, 8 processes racing (checked from the ledger
// and from the fake driver's own count), and a SIGKILLed process's share given to the others.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fake_libcuda/fake_device_state.hpp"
#include "plimsoll/sharing.hpp"
#include "sharing/ledger_scan.hpp"
#include "sharing_support.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using plimsoll::testing::ProgramRun;
using plimsoll::testing::TempDirectory;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
constexpr const char* kLedgerName = "plimsoll-ledger-GPU-fafafafa-fafa-fafa-fafa-fafafafafafa";

using Environment = std::map<std::string, std::string>;

// The environment of a governed client: fake GPU of `gpu_mib`, a context of `context_mib`, our ledger directory.
Environment governed(const TempDirectory& dir, const std::string& share, std::uint64_t gpu_mib = 1024,
                     std::uint64_t context_mib = 64) {
  return {{"LD_LIBRARY_PATH", PLIMSOLL_FAKE_LIBCUDA_DIR},
          {"LD_PRELOAD", PLIMSOLL_CUDA_INTERCEPT_SO},
          {"PLIMSOLL_SHARE", share},
          {"PLIMSOLL_LEDGER_DIR", dir.path()},
          {"PLIMSOLL_FAKE_CUDA_BYTES", std::to_string(gpu_mib) + "MiB"},
          {"PLIMSOLL_FAKE_CUDA_CONTEXT_BYTES", std::to_string(context_mib) + "MiB"},
          {"PLIMSOLL_SHARE_TRIM_WAIT_MS", "0"}};
}

ProgramRun client(const std::string& way, const std::vector<std::string>& operations, const Environment& environment) {
  std::vector<std::string> argv = {way == "linked" ? PLIMSOLL_CUDA_CLIENT_LINKED : PLIMSOLL_CUDA_CLIENT, way};
  argv.insert(argv.end(), operations.begin(), operations.end());
  return plimsoll::testing::run_program(argv, environment);
}

// "info 0 free=X total=Y" lines, in order.
std::vector<std::pair<std::uint64_t, std::uint64_t>> infos(const std::string& out) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> found;
  const std::regex line(R"(info 0 free=(\d+) total=(\d+))");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it)
    found.emplace_back(std::stoull((*it)[1]), std::stoull((*it)[2]));
  return found;
}

int count_of(const std::string& text, const std::string& what) {
  int count = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

class ThreeWays : public ::testing::TestWithParam<std::string> {};

TEST_P(ThreeWays, BudgetIsAnsweredChargedAndEnforced) {
  const TempDirectory dir;
  const ProgramRun run = client(GetParam(), {"init", "info", "total", "alloc", "100MiB", "info", "fill", "100MiB"},
                                governed(dir, "cuda:0=256MiB:512MiB"));
  ASSERT_EQ(run.status, 0) << run.err;
  const auto info = infos(run.out);
  ASSERT_EQ(info.size(), 2u) << run.out;
  EXPECT_EQ(info[0].second, 512 * MiB) << "cuMemGetInfo's total is the cap, not the GPU";
  EXPECT_EQ(info[0].first, 448 * MiB) << "free is the cap less the context's measured 64 MiB";
  EXPECT_EQ(info[1].first, 348 * MiB);
  EXPECT_THAT(run.out, HasSubstr("total 0 536870912")) << "cuDeviceTotalMem answers the cap";
  EXPECT_THAT(run.out, HasSubstr("fill 3 2")) << "three more fit, the fourth is CUDA_ERROR_OUT_OF_MEMORY";
  EXPECT_EQ(count_of(run.err, "refused"), 1) << "the report is printed once:\n" << run.err;
  EXPECT_THAT(run.err, HasSubstr("cuMemAlloc of 100.00 MiB refused on cuda:0"));
  EXPECT_THAT(run.err, HasSubstr("it would pass its cap"));
  EXPECT_THAT(run.err, HasSubstr("who holds the GPU"));
  EXPECT_THAT(run.err, HasSubstr("<- this process"));
  EXPECT_THAT(run.err, HasSubstr("fix:"));
}

INSTANTIATE_TEST_SUITE_P(CudaIntercept, ThreeWays, ::testing::Values("linked", "dlsym", "procaddress"));

TEST(CudaIntercept, SharingEnvironmentGovernsTheChild) {
  // What `plimsoll run --device cuda:0=128MiB:256MiB` sets, from the library call it uses.
  const TempDirectory dir;
  Environment environment = {{"LD_LIBRARY_PATH", PLIMSOLL_FAKE_LIBCUDA_DIR}, {"PLIMSOLL_FAKE_CUDA_CONTEXT_BYTES", "0"}};
  for (const auto& [name, value] :
       sharing_environment({parse_share_spec("cuda:0=128MiB:256MiB")}, {}, dir.path(), PLIMSOLL_CUDA_INTERCEPT_SO))
    environment[name] = value;
  const ProgramRun run = client("procaddress", {"init", "info", "alloc", "300MiB"}, environment);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(infos(run.out).at(0), (std::pair<std::uint64_t, std::uint64_t>{256 * MiB, 256 * MiB}));
  EXPECT_THAT(run.out, HasSubstr("alloc 314572800 2"));
}

TEST(CudaIntercept, PlimsollRunWithAGpuShareGovernsAnyProgramAtTheDriver) {
  // `plimsoll run --device cuda:0=SHARE:CAP` on a program that is not Python and uses no plimsoll: its driver calls
  // are charged to the share and answered with the cap, and its exit status is passed on.
  const TempDirectory dir;
  const Environment environment = {{"LD_LIBRARY_PATH", PLIMSOLL_FAKE_LIBCUDA_DIR},
                                   {"PLIMSOLL_FAKE_CUDA_CONTEXT_BYTES", "0"},
                                   {"PLIMSOLL_LEDGER_DIR", dir.path()},
                                   {"PLIMSOLL_CUDA_INTERCEPT", PLIMSOLL_CUDA_INTERCEPT_SO}};
  const ProgramRun run = plimsoll::testing::run_program(
      {PLIMSOLL_CLI_PATH, "run", "--quiet", "--device", "cuda:0=128MiB:256MiB", "--", PLIMSOLL_CUDA_CLIENT,
       "procaddress", "init", "info", "alloc", "300MiB"},
      environment);
  if (run.err.find("built without its Python module") != std::string::npos) {
    GTEST_SKIP() << "plimsoll run needs the Python module (python3-dev, python3-numpy, python3-pybind11)";
  }
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(infos(run.out).at(0), (std::pair<std::uint64_t, std::uint64_t>{256 * MiB, 256 * MiB}));
  EXPECT_THAT(run.out, HasSubstr("alloc 314572800 2")) << "300 MiB passes the 256 MiB cap: CUDA_ERROR_OUT_OF_MEMORY";
  EXPECT_THAT(run.err, HasSubstr("refused on cuda:0"));

  const ProgramRun bad = plimsoll::testing::run_program(
      {PLIMSOLL_CLI_PATH, "run", "--device", "cuda:0=256MiB:128MiB", "--", "/bin/true"}, environment);
  EXPECT_EQ(bad.status, 125) << "plimsoll's own usage error, not the program's";
  EXPECT_THAT(bad.err, HasSubstr("cuda:0"));
}

TEST(CudaIntercept, WithoutThePreloadTheDriverAnswersForTheWholeGpu) {
  const TempDirectory dir;
  Environment environment = governed(dir, "cuda:0=256MiB");
  environment.erase("LD_PRELOAD");
  const ProgramRun run = client("dlsym", {"init", "info", "fill", "300MiB"}, environment);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(infos(run.out).at(0), (std::pair<std::uint64_t, std::uint64_t>{960 * MiB, 1024 * MiB}));
  EXPECT_THAT(run.out, HasSubstr("fill 3 2"));
}

TEST(CudaIntercept, PreloadedWithoutAShareTheJobIsNotGoverned) {
  const TempDirectory dir;
  Environment environment = governed(dir, "");
  const ProgramRun run = client("procaddress", {"init", "info", "alloc", "900MiB"}, environment);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(infos(run.out).at(0).second, 1024 * MiB);
  EXPECT_THAT(run.out, HasSubstr("alloc 943718400 0"));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "no ledger for an ungoverned job";
}

TEST(CudaIntercept, DlsymRtldNextFindsTheNextObjectsSymbol) {
  // A library that wraps malloc finds the real one with dlsym(RTLD_NEXT, "malloc"), through our dlsym: it must get
  // libc's, found after the caller (a link_map of an object loaded at start is no dlsym handle: it used to fault).
  const TempDirectory dir;
  for (const char* way : {"dlsym", "linked"}) {
    const ProgramRun run = client(way, {"next", "init", "alloc", "1MiB"}, governed(dir, "cuda:0=256MiB"));
    EXPECT_EQ(run.status, 0) << way << ": " << run.err;
    EXPECT_THAT(run.out, HasSubstr("next 1")) << way;
    EXPECT_THAT(run.out, HasSubstr("alloc 1048576 0")) << way;
  }
}

TEST(CudaIntercept, DlsymRtldNextFromALaterPreloadIsNotItsOwnDefinition) {
  // A preload after the interposer wraps getppid (tests/fake_libcuda/next_probe.cpp) and asks dlsym(RTLD_NEXT,
  // "getppid") for the real one: the interposer's dlsym answers, and must search after the probe (libc's), not from
  // the start (which finds the probe's own: RTLD_DEFAULT's answer, and a wrapper calling itself forever).
  const TempDirectory dir;
  Environment environment = governed(dir, "cuda:0=256MiB");
  environment["LD_PRELOAD"] = std::string(PLIMSOLL_CUDA_INTERCEPT_SO) + " " + PLIMSOLL_NEXT_PROBE_SO;
  const ProgramRun run = client("dlsym", {"probe", "preloaded", "init", "alloc", "1MiB"}, environment);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("probe libc=1 own=0"));
  EXPECT_THAT(run.out, HasSubstr("alloc 1048576 0"));
}

TEST(CudaIntercept, DlsymRtldNextSkipsADefinitionBeforeTheCaller) {
  // Two preloads wrap getppid (the probe twice, under two names): the second one's next getppid is libc's, neither the
  // first one's (before it: a walk from the start finds that) nor its own. `probe PATH` reaches the second one by
  // dlopen, which returns the preloaded object.
  const TempDirectory dir;
  Environment environment = governed(dir, "cuda:0=256MiB");
  const std::string probes = std::string(PLIMSOLL_NEXT_PROBE_TWIN_SO) + " " + PLIMSOLL_NEXT_PROBE_SO;
  environment["LD_PRELOAD"] = std::string(PLIMSOLL_CUDA_INTERCEPT_SO) + " " + probes;
  const ProgramRun run = client("dlsym", {"probe", PLIMSOLL_NEXT_PROBE_SO, "init", "alloc", "1MiB"}, environment);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("probe libc=1 own=0"));
  EXPECT_THAT(run.out, HasSubstr("alloc 1048576 0"));
  // glibc's own answer, without the interposer, is the same.
  Environment plain = governed(dir, "cuda:0=256MiB");
  plain["LD_PRELOAD"] = probes;
  const ProgramRun glibc = client("dlsym", {"probe", PLIMSOLL_NEXT_PROBE_SO}, plain);
  ASSERT_EQ(glibc.status, 0) << glibc.err;
  EXPECT_THAT(glibc.out, HasSubstr("probe libc=1 own=0"));
}

TEST(CudaIntercept, DlsymRtldNextFromADlopenedLibrarySearchesItsDependencies) {
  // The same probe dlopen'ed by the program, as an extension module is: glibc searches the probe's own scope (it and
  // its dependencies, libc among them, all loaded before it), not the objects loaded after it (there are none).
  const TempDirectory dir;
  const ProgramRun run = client("dlsym", {"probe", PLIMSOLL_NEXT_PROBE_SO, "init", "alloc", "1MiB"},
                                governed(dir, "cuda:0=256MiB"));
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("probe libc=1 own=0"));
  // Without the interposer, glibc's own answer is the same.
  Environment plain = governed(dir, "cuda:0=256MiB");
  plain.erase("LD_PRELOAD");
  const ProgramRun glibc = client("dlsym", {"probe", PLIMSOLL_NEXT_PROBE_SO}, plain);
  ASSERT_EQ(glibc.status, 0) << glibc.err;
  EXPECT_THAT(glibc.out, HasSubstr("probe libc=1 own=0"));
}

TEST(CudaIntercept, EveryAllocationKindIsChargedAndCredited) {
  const TempDirectory dir;
  const ProgramRun run = client(
      "procaddress",
      {"init", "info", "managed", "10MiB", "info", "create", "8MiB", "info", "release", "info", "async", "4MiB", "info",
       "freeasync", "info", "pool", "2MiB", "info", "pitch", "1000", "1000", "info"},
      governed(dir, "cuda:0=512MiB", 1024, 0));
  ASSERT_EQ(run.status, 0) << run.err;
  const auto info = infos(run.out);
  ASSERT_EQ(info.size(), 8u) << run.out;
  EXPECT_EQ(info[0].first - info[1].first, 10 * MiB) << "cuMemAllocManaged is counted";
  EXPECT_EQ(info[1].first - info[2].first, 8 * MiB) << "cuMemCreate";
  EXPECT_EQ(info[3].first, info[1].first) << "cuMemRelease credits it";
  EXPECT_EQ(info[3].first - info[4].first, 4 * MiB) << "cuMemAllocAsync";
  EXPECT_EQ(info[5].first, info[3].first) << "cuMemFreeAsync credits it";
  EXPECT_EQ(info[5].first - info[6].first, 2 * MiB) << "cuMemAllocFromPoolAsync";
  EXPECT_EQ(info[6].first - info[7].first, 1024u * 1000u) << "cuMemAllocPitch, rows padded to 512 bytes";
  EXPECT_THAT(run.out, Not(HasSubstr(" 2\n"))) << "nothing refused";
}

TEST(CudaIntercept, PrimaryContextCostIsMeasured) {
  const TempDirectory dir;
  const ProgramRun run = client("linked", {"primary", "info"}, governed(dir, "cuda:0=256MiB", 1024, 100));
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(infos(run.out).at(0).first, 156 * MiB);
}

TEST(CudaIntercept, ContextCostCanBeGivenInsteadOfMeasured) {
  const TempDirectory dir;
  Environment environment = governed(dir, "cuda:0=256MiB", 1024, 100);
  environment["PLIMSOLL_SHARE_CONTEXT_BYTES"] = "10MiB";
  const ProgramRun run = client("dlsym", {"init", "info"}, environment);
  EXPECT_EQ(infos(run.out).at(0).first, 246 * MiB);
}

TEST(CudaIntercept, JobsStartingTogetherEachCountOnlyTheirOwnContext) {
  // Each context takes 30 ms to create after its 100 MiB are taken: without the ledger's context token, a job
  // measuring its context would count the others' new contexts as its own.
  const TempDirectory dir;
  Environment environment = governed(dir, "cuda:0=200MiB", 1024, 100);
  environment["PLIMSOLL_FAKE_CUDA_STATE"] = dir.path() + "/fake-gpu";
  environment["PLIMSOLL_FAKE_CUDA_CONTEXT_DELAY_MS"] = "30";
  std::vector<ProgramRun> runs(4);
  std::vector<std::thread> jobs;
  for (std::size_t i = 0; i < runs.size(); ++i)
    jobs.emplace_back([&, i] { runs[i] = client(i % 2 == 0 ? "dlsym" : "linked", {"init", "info"}, environment); });
  for (std::thread& job : jobs) job.join();
  for (const ProgramRun& run : runs) {
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_EQ(infos(run.out).at(0).first, 100 * MiB) << run.out;
  }
}

TEST(CudaIntercept, MalformedShareRefusesEveryAllocationWithTheReason) {
  const TempDirectory dir;
  const ProgramRun run = client("dlsym", {"init", "alloc", "1MiB"}, governed(dir, "cuda:0=lots"));
  EXPECT_THAT(run.out, HasSubstr("alloc 1048576 2"));
  EXPECT_THAT(run.err, HasSubstr("PLIMSOLL_SHARE is not usable"));
  EXPECT_THAT(run.err, HasSubstr("cuda:N=SHARE[:CAP]"));
}

TEST(CudaIntercept, GpuWithoutAShareIsRefused) {
  const TempDirectory dir;
  const ProgramRun run = client("dlsym", {"init", "alloc", "1MiB"}, governed(dir, "cuda:1=1GiB"));
  EXPECT_THAT(run.out, HasSubstr("alloc 1048576 2"));
  EXPECT_THAT(run.err, HasSubstr("no share of cuda:0"));
}

TEST(CudaIntercept, CorruptLedgerIsNotTrusted) {
  const TempDirectory dir;
  std::ofstream(dir.path() + "/" + kLedgerName) << std::string(9000, 'x');
  const ProgramRun run = client("linked", {"init", "alloc", "1MiB"}, governed(dir, "cuda:0=256MiB"));
  EXPECT_THAT(run.out, HasSubstr("alloc 1048576 2"));
  EXPECT_THAT(run.err, HasSubstr("cannot be used"));
  EXPECT_THAT(run.err, HasSubstr("remove the file"));
}

// A client started in the background that prints "holding" once its operations are done, then waits for SIGKILL.
class Holder {
 public:
  Holder(const std::vector<std::string>& operations, const Environment& environment, const TempDirectory& dir)
      : out_path_(dir.path() + "/holder.out") {
    std::vector<std::string> argv = {PLIMSOLL_CUDA_CLIENT, "dlsym"};
    argv.insert(argv.end(), operations.begin(), operations.end());
    argv.push_back("hold");
    pid_ = ::fork();
    if (pid_ == 0) plimsoll::testing::exec_program(argv, environment, out_path_, out_path_ + ".err");
    for (int i = 0; i < 5000 && output().find("holding") == std::string::npos; ++i) ::usleep(1000);
  }
  ~Holder() { kill(); }
  std::string output() const { return plimsoll::testing::read_text(out_path_); }
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  int pid() const { return pid_; }

 private:
  std::string out_path_;
  int pid_ = -1;
};

TEST(CudaIntercept, SharesPassingTheGpuAreRefusedAtTheFirstAllocation) {
  const TempDirectory dir;
  Environment environment = governed(dir, "cuda:0=800MiB", 1024, 0);
  environment["PLIMSOLL_FAKE_CUDA_STATE"] = dir.path() + "/fake-gpu";
  const Holder holder({"init", "alloc", "1MiB"}, environment, dir);
  ASSERT_THAT(holder.output(), HasSubstr("holding"));
  environment["PLIMSOLL_SHARE"] = "cuda:0=400MiB";
  const ProgramRun run = client("dlsym", {"init", "alloc", "1MiB"}, environment);
  EXPECT_THAT(run.out, HasSubstr("alloc 1048576 2"));
  EXPECT_THAT(run.err, HasSubstr("does not fit"));
  EXPECT_THAT(run.err, HasSubstr("ask for at most 224.00 MiB"));
}

TEST(CudaIntercept, KilledJobsMemoryGoesToTheOthersAndTopShowsIt) {
  const TempDirectory dir;
  Environment environment = governed(dir, "cuda:0=256MiB:1GiB", 1024, 0);
  environment["PLIMSOLL_FAKE_CUDA_STATE"] = dir.path() + "/fake-gpu";
  Holder holder({"init", "fill", "100MiB"}, environment, dir);
  ASSERT_THAT(holder.output(), HasSubstr("fill 10 2")) << "the only job may borrow all the GPU no share awaits";
  // top sees it from outside.
  const ProgramRun top = plimsoll::testing::run_program({PLIMSOLL_CLI_PATH, "top", "--json", "--ledger-dir", dir.path()}, {});
  ASSERT_EQ(top.status, 0) << top.err;
  const nlohmann::json document = nlohmann::json::parse(top.out);
  ASSERT_EQ(document["gpus"].size(), 1u);
  const nlohmann::json& process = document["gpus"][0]["processes"][0];
  EXPECT_EQ(process["pid"], holder.pid());
  EXPECT_EQ(process["governed_by"], "driver");
  EXPECT_EQ(process["reserved_bytes"], 1000 * MiB);
  EXPECT_EQ(process["borrowed_bytes"], 744 * MiB);
  EXPECT_EQ(process["refusals"], 1);
  // Another job with a guaranteed share cannot have what the first holds.
  environment["PLIMSOLL_SHARE"] = "cuda:0=512MiB";
  ProgramRun second = client("dlsym", {"init", "alloc", "200MiB"}, environment);
  EXPECT_THAT(second.out, HasSubstr("alloc 209715200 2"));
  EXPECT_THAT(second.err, HasSubstr("the GPU's limit is reached"));
  holder.kill();
  second = client("dlsym", {"init", "alloc", "200MiB", "alloc", "300MiB"}, environment);
  EXPECT_THAT(second.out, HasSubstr("alloc 209715200 0")) << second.err;
  EXPECT_THAT(second.out, HasSubstr("alloc 314572800 0")) << second.err;
}

// Maps the fake GPU's shared state to read the driver's own count.
void read_fake_state(const std::string& path, std::uint64_t& peak, std::uint64_t& refusals,
                     std::uint64_t& allocations) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  void* mapped = ::mmap(nullptr, sizeof(fake_cuda::DeviceState), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  const auto* state = static_cast<const fake_cuda::DeviceState*>(mapped);
  peak = state->peak_used.load();
  refusals = state->refusals.load();
  allocations = state->allocations.load();
  ::munmap(mapped, sizeof(fake_cuda::DeviceState));
}

TEST(CudaIntercept, EightJobsRacingNeverPassTheGpuByTheDriversOwnCount) {
  const TempDirectory dir;
  Environment environment = governed(dir, "cuda:0=32MiB:512MiB", 512, 0);
  const std::string state = dir.path() + "/fake-gpu";
  environment["PLIMSOLL_FAKE_CUDA_STATE"] = state;
  std::vector<std::thread> racers;
  std::vector<ProgramRun> runs(8);
  for (int i = 0; i < 8; ++i)
    racers.emplace_back([&, i] {
      runs[static_cast<std::size_t>(i)] =
          client(i % 3 == 0 ? "linked" : i % 3 == 1 ? "dlsym" : "procaddress",
                 {"init", "churn", "1500", "96MiB", std::to_string(i + 1)}, environment);
    });
  for (std::thread& racer : racers) racer.join();
  std::uint64_t admitted = 0, refused = 0;
  const std::regex counts(R"(churn admitted=(\d+) refused=(\d+))");
  for (const ProgramRun& run : runs) {
    ASSERT_EQ(run.status, 0) << run.err;
    std::smatch match;
    ASSERT_TRUE(std::regex_search(run.out, match, counts)) << run.out << run.err;
    admitted += std::stoull(match[1]);
    refused += std::stoull(match[2]);
  }
  EXPECT_GT(refused, 0u) << "the jobs met the limit (or the test could not see a breach)";
  std::uint64_t peak = 0, driver_refusals = 0, allocations = 0;
  read_fake_state(state, peak, driver_refusals, allocations);
  EXPECT_EQ(allocations, admitted);
  EXPECT_EQ(driver_refusals, 0u) << "the ledger refused before the driver ever had to";
  EXPECT_LE(peak, 512 * MiB);
  // Every entry is a finished process's, reclaimed by the next writer.
  const auto readings = sharing::read_ledgers(dir.path());
  ASSERT_EQ(readings.size(), 1u);
  for (const auto& row : readings[0].snapshot->processes) EXPECT_FALSE(row.running);
}

}  // namespace
}  // namespace plimsoll
