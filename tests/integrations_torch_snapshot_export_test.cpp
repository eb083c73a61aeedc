// plimsoll recordings exported as PyTorch memory snapshots (tools/torch_snapshot/from_plimsoll.py): a recording of
// a device is exported, read back with the project's own snapshot reader (to_plimsoll.py) and compared event by
// event with the recording; the end state's segments tile their blocks; where Python PyTorch is installed, its own
// snapshot tools (torch.cuda._memory_viz) read the pickle; bad input is refused with exit status 2.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backings/sim_backing.hpp"
#include "plimsoll/allocator.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/trace.hpp"

namespace plimsoll {
namespace {

using ::testing::HasSubstr;
using Kind = TraceEvent::Kind;
const std::string kTools = std::string(PLIMSOLL_SOURCE_DIR) + "/tools/torch_snapshot/";

struct CommandResult {
  int status = -1;
  std::string output;
};

CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  std::size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, got);
  const int wait_status = pclose(pipe);
  result.status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
  return result;
}

bool have_python3() { return std::system("python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1") == 0; }

std::string scratch_dir() {
  const std::string dir = ::testing::TempDir() + "torch_snapshot_export_" +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir + "/";
}

// A recording of a simulated device: allocations of several sizes and tags, frees in another order, some blocks
// left live at the end, and an out-of-memory request.
void record_workload(const std::string& path) {
  auto recording = Recording::open(path);
  DeviceDescription description;
  description.name = "sim:64MiB";
  description.hardware = "simulated device";
  description.limit_bytes = 64 << 20;
  Allocator allocator(description, std::make_unique<backings::SimBacking>(std::uint64_t{64} << 20));
  allocator.record_to(recording);
  std::vector<void*> live;
  for (int i = 0; i < 40; ++i)
    live.push_back(allocator.allocate(static_cast<std::size_t>(1000 + i * 37000), i % 2 ? "weights" : "activations"));
  for (int i = 0; i < 40; i += 3) allocator.deallocate(live[static_cast<std::size_t>(i)]);
  EXPECT_EQ(allocator.try_allocate(std::size_t{1} << 30), nullptr);
  allocator.record_to(nullptr);
  recording->close();
}

TEST(TorchSnapshotExport, ReadsBackEventByEventThroughTheProjectsSnapshotReader) {
  if (!have_python3()) GTEST_SKIP() << "python3 (3.11 or later) is not on PATH; the snapshot tools need it";
  const std::string dir = scratch_dir();
  record_workload(dir + "run.plimsoll");
  const CommandResult exported =
      run_command("python3 '" + kTools + "from_plimsoll.py' '" + dir + "run.plimsoll' '" + dir + "snapshot.pickle'");
  ASSERT_EQ(exported.status, 0) << exported.output;
  EXPECT_THAT(exported.output, HasSubstr("segments at the end"));
  const CommandResult back =
      run_command("python3 '" + kTools + "to_plimsoll.py' '" + dir + "snapshot.pickle' '" + dir + "back.plimsoll'");
  ASSERT_EQ(back.status, 0) << back.output;

  const Trace original = read_trace(dir + "run.plimsoll");
  const Trace reread = read_trace(dir + "back.plimsoll");
  auto significant = [](const Trace& trace) {
    std::vector<std::pair<Kind, std::uint64_t>> events;
    for (const TraceEvent& event : trace.events)
      if (event.kind != Kind::marker) events.emplace_back(event.kind, event.kind == Kind::free ? 0 : event.bytes);
    return events;
  };
  EXPECT_EQ(significant(reread), significant(original));
  EXPECT_EQ(reread.allocations, original.allocations);
  EXPECT_EQ(reread.frees, original.frees);
  EXPECT_EQ(reread.peak_live_bytes, original.peak_live_bytes);
  ASSERT_EQ(reread.devices.size(), 2u);
  EXPECT_EQ(reread.devices[1], "cuda:0") << "a non-CUDA device becomes PyTorch's device 0";

  // The end state: segments whose blocks tile them, holding exactly the live blocks.
  const CommandResult segments = run_command(
      "python3 -c \"import pickle,sys; s=pickle.load(open(sys.argv[1],'rb')); "
      "assert all(g['total_size']==sum(b['size'] for b in g['blocks']) for g in s['segments']); "
      "print(sum(1 for g in s['segments'] for b in g['blocks'] if b['state']=='active_allocated'))\" '" +
      dir + "snapshot.pickle'");
  ASSERT_EQ(segments.status, 0) << segments.output;
  EXPECT_EQ(std::stoul(segments.output), 40u - 14u) << "the blocks live at the end";
}

TEST(TorchSnapshotExport, PyTorchsOwnSnapshotToolsReadIt) {
  if (!have_python3()) GTEST_SKIP() << "python3 (3.11 or later) is not on PATH";
  // The interpreter on PATH may be a virtual environment without torch; Debian's python3-torch is in /usr/bin.
  std::string python;
  for (const char* candidate : {"python3", "/usr/bin/python3"}) {
    if (std::system((std::string(candidate) + " -c 'import torch.cuda._memory_viz' >/dev/null 2>&1").c_str()) == 0) {
      python = candidate;
      break;
    }
  }
  if (python.empty()) GTEST_SKIP() << "Python PyTorch (torch.cuda._memory_viz) is not installed";
  const std::string dir = scratch_dir();
  record_workload(dir + "run.plimsoll");
  ASSERT_EQ(run_command("python3 '" + kTools + "from_plimsoll.py' '" + dir + "run.plimsoll' '" + dir +
                        "snapshot.pickle'").status, 0);
  // torch 1.13's functions take the list of segments, torch 2.x's the snapshot dict; stats() asserts each segment's
  // blocks add up to it, segments() writes one flamegraph line per block.
  const CommandResult viz = run_command(
      python + " -c \"import pickle,sys; from torch.cuda import _memory_viz as v; "
      "s=pickle.load(open(sys.argv[1],'rb'))\n"
      "try: lines=v.segments(s, format_flamegraph=lambda t: t)\n"
      "except (TypeError, KeyError): lines=v.segments(s['segments'], format_flamegraph=lambda t: t)\n"
      "print(lines.count('active_allocated'))\n"
      "if hasattr(v, 'stats'): print(v.stats(s['segments'])['active_allocated'])\" '" + dir + "snapshot.pickle'");
  ASSERT_EQ(viz.status, 0) << viz.output;
  EXPECT_THAT(viz.output, ::testing::StartsWith("26\n"));
}

TEST(TorchSnapshotExport, BadInputIsRefusedWithTheFix) {
  if (!have_python3()) GTEST_SKIP() << "python3 (3.11 or later) is not on PATH";
  const std::string dir = scratch_dir();
  std::ofstream(dir + "text.trace") << "a 1 256\nf 1\n";
  CommandResult result =
      run_command("python3 '" + kTools + "from_plimsoll.py' '" + dir + "text.trace' '" + dir + "out.pickle'");
  EXPECT_EQ(result.status, 2);
  EXPECT_THAT(result.output, HasSubstr("not a plimsoll recording"));
  EXPECT_FALSE(std::filesystem::exists(dir + "out.pickle"));
  record_workload(dir + "run.plimsoll");
  result = run_command("python3 '" + kTools + "from_plimsoll.py' '" + dir + "run.plimsoll' '" + dir +
                       "out.pickle' --device cuda:7");
  EXPECT_EQ(result.status, 2);
  EXPECT_THAT(result.output, HasSubstr("sim:64MiB"));
  result = run_command("python3 '" + kTools + "from_plimsoll.py' '" + dir + "missing.plimsoll' '" + dir + "o.pickle'");
  EXPECT_EQ(result.status, 2);
  EXPECT_THAT(result.output, HasSubstr("cannot read the recording"));
}

}  // namespace
}  // namespace plimsoll
