// `plimsoll run [OPTIONS] -- COMMAND [ARGS...]`: runs a Python program with plimsoll underneath and reports on its
// memory when it exits (docs/python.md). The child streams a recording (steps, Python call sites) and writes its
// devices' stats at exit (python/plimsoll/_run_child.py); this side reads both after the child is gone, so a
// program that calls os._exit, crashes or is killed still gets a report, from the recording alone.
//
// Exit status: the child's (128 + N when a signal N ended it); plimsoll's own: 125 (bad option or input, or a
// report that could not be written), 126 (COMMAND cannot be executed), 127 (COMMAND not found).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/leak_text.hpp"
#include "cli/output.hpp"
#include "cli/run_devices.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"
#include "plimsoll/trace.hpp"
#include "telemetry/leak_watch.hpp"
#include "telemetry/output_file.hpp"
#include "telemetry/replay.hpp"
#include "telemetry/timeline.hpp"
#include "telemetry/timeline_html.hpp"

namespace plimsoll::cli {

// A failure to start COMMAND, with the exit status `run` gives for it.
struct RunError : Error {
  RunError(int exit_status, const std::string& message) : Error(message), status(exit_status) {}
  int status;
};

}  // namespace plimsoll::cli

namespace {

constexpr int kUsageError = 125;
constexpr int kCannotExecute = 126;
constexpr int kNotFound = 127;
// Host devices under `run` give cached free memory beyond this back to the kernel: a step whose transient memory
// fits keeps reusing mapped blocks (no page faults), and a freed 1 GiB tensor goes back.
constexpr const char* kDefaultHostReleaseThreshold = "256MiB";

struct RunArgs {
  std::string memory_limit;
  std::string devices;
  std::string policy;
  std::string release_threshold = kDefaultHostReleaseThreshold;
  std::string record;
  std::string html;
  std::string json;
  bool quiet = false;
  bool no_call_sites = false;
  std::vector<std::string> command;
};

struct ChildEnd {
  int exit_status = 0;  // what `run` passes on
  int signal = 0;       // the signal that ended the child, or 0
};

std::string python_package_dir() {
  const char* from_env = std::getenv("PLIMSOLL_PYTHONPATH");
  return from_env != nullptr && *from_env != '\0' ? std::string(from_env) : std::string(PLIMSOLL_PYTHON_DIR);
}

void set_child_environment(const RunArgs& args, const std::vector<plimsoll::cli::RunDevice>& devices,
                           const std::string& run_dir, const std::string& recording) {
  const std::string package = python_package_dir();
  if (package.empty()) {
    throw plimsoll::InvalidArgument("this plimsoll was built without its Python module (CMake found no python3-dev, "
                                    "python3-numpy or python3-pybind11): run scripts/install-deps.sh and rebuild, "
                                    "or set PLIMSOLL_PYTHONPATH to the folder that holds plimsoll/");
  }
  if (!std::filesystem::exists(std::filesystem::path(package) / "plimsoll" / "_run" / "sitecustomize.py")) {
    throw plimsoll::InvalidArgument(fmt::format("the plimsoll Python package is not at {}: build the target _plimsoll "
                                                "(it needs python3-dev, python3-numpy, python3-pybind11) or set "
                                                "PLIMSOLL_PYTHONPATH to the folder that holds plimsoll/",
                                                package));
  }
  const char* old = std::getenv("PYTHONPATH");
  std::string path = package + "/plimsoll/_run:" + package;
  if (old != nullptr && *old != '\0') path += std::string(":") + old;
  setenv("PYTHONPATH", path.c_str(), 1);
  setenv("PLIMSOLL_RUN_DIR", run_dir.c_str(), 1);
  // The report gives each device's limit: no "created device" line in the middle of the program's output, unless
  // the user asked for it.
  setenv("PLIMSOLL_LOG", "false", 0);
  setenv("PLIMSOLL_RUN_RECORD", recording.c_str(), 1);
  setenv("PLIMSOLL_RUN_DEVICES", plimsoll::cli::run_devices_env(devices).c_str(), 1);
  setenv("PLIMSOLL_RUN_GROWTH", args.policy.c_str(), 1);
  setenv("PLIMSOLL_RUN_SITES", args.no_call_sites ? "0" : "1", 1);
  setenv("PLIMSOLL_RUN_RELEASE", fmt::format("{}", plimsoll::parse_size(args.release_threshold)).c_str(), 1);
}

// fork + exec; an exec failure comes back through a close-on-exec pipe as errno.
ChildEnd run_child(const std::vector<std::string>& command) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) throw plimsoll::Error(fmt::format("pipe: {}", std::strerror(errno)));
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw plimsoll::Error(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    close(pipe_fds[0]);
    execvp(argv[0], argv.data());
    const int error = errno;
    [[maybe_unused]] const ssize_t written = write(pipe_fds[1], &error, sizeof error);
    _exit(kNotFound);
  }
  close(pipe_fds[1]);
  int exec_error = 0;
  const ssize_t got = read(pipe_fds[0], &exec_error, sizeof exec_error);
  close(pipe_fds[0]);
  // The terminal's Ctrl-C reaches the child (same process group); `run` waits for it and still reports.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction old_int {};
  sigaction(SIGINT, &ignore, &old_int);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  sigaction(SIGINT, &old_int, nullptr);
  if (got == static_cast<ssize_t>(sizeof exec_error)) {
    const bool missing = exec_error == ENOENT;
    throw plimsoll::cli::RunError(missing ? kNotFound : kCannotExecute,
                                  fmt::format("cannot run {}: {}{}", command[0], std::strerror(exec_error),
                                              missing ? "; check the name, or give its path" : ""));
  }
  if (WIFSIGNALED(status)) return {128 + WTERMSIG(status), WTERMSIG(status)};
  return {WEXITSTATUS(status), 0};
}

std::optional<nlohmann::json> read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

// Peaks from the recording alone, when the child could not write its stats.
nlohmann::ordered_json devices_from_trace(const plimsoll::Trace& trace) {
  std::map<std::uint16_t, std::pair<std::uint64_t, std::uint64_t>> in_use_peak;
  std::map<std::pair<std::uint16_t, std::uint64_t>, std::uint64_t> live;
  for (const plimsoll::TraceEvent& event : trace.events) {
    if (event.kind != plimsoll::TraceEvent::Kind::allocate && event.kind != plimsoll::TraceEvent::Kind::free) continue;
    auto& [in_use, peak] = in_use_peak[event.device];
    if (event.kind == plimsoll::TraceEvent::Kind::allocate) {
      live[{event.device, event.slot}] = event.bytes;
      in_use += event.bytes;
      peak = std::max(peak, in_use);
    } else if (event.kind == plimsoll::TraceEvent::Kind::free) {
      if (const auto found = live.find({event.device, event.slot}); found != live.end()) {
        in_use -= found->second;
        live.erase(found);
      }
    }
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& [device, numbers] : in_use_peak) {
    nlohmann::ordered_json entry;
    entry["device"] = device < trace.devices.size() ? trace.devices[device] : fmt::format("#{}", device);
    entry["in_use_bytes"] = numbers.first;
    entry["peak_in_use_bytes"] = numbers.second;
    entry["from"] = "recording";
    out.push_back(std::move(entry));
  }
  return out;
}

std::size_t count_notes(const std::string& run_dir, std::string_view prefix) {
  std::size_t count = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir, error)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) ++count;
  }
  return count;
}

std::string device_table(const nlohmann::ordered_json& devices) {
  using Align = plimsoll::cli::Table::Align;
  plimsoll::cli::Table table({{"device", Align::left},
                              {"tag", Align::left},
                              {"in use", Align::right},
                              {"peak in use", Align::right},
                              {"reserved", Align::right},
                              {"peak reserved", Align::right},
                              {"limit", Align::right}});
  const auto size = [](const nlohmann::ordered_json& entry, const char* key) {
    return entry.contains(key) ? plimsoll::format_size(entry[key].get<std::uint64_t>()) : std::string("-");
  };
  for (const auto& device : devices) {
    const std::string name = device["device"].get<std::string>();
    if (device.contains("tags")) {
      for (const auto& tag : device["tags"]) {
        table.add_row({name, tag["tag"].get<std::string>(), size(tag, "in_use_bytes"), size(tag, "peak_in_use_bytes"),
                       "", "", ""});
      }
    }
    table.add_row({name, "all", size(device, "in_use_bytes"), size(device, "peak_in_use_bytes"),
                   size(device, "reserved_bytes"), size(device, "peak_reserved_bytes"), size(device, "limit_bytes")});
  }
  return table.render();
}

int report(const RunArgs& args, const ChildEnd& end, const std::string& run_dir, const std::string& recording) {
  nlohmann::ordered_json out;
  out["exit_status"] = end.exit_status;
  out["signal"] = end.signal == 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(end.signal);
  const std::optional<nlohmann::json> stats = read_json(run_dir + "/stats.json");
  std::optional<plimsoll::Trace> trace;
  std::string trace_problem;
  try {
    if (std::filesystem::exists(recording) && std::filesystem::file_size(recording) > 0) trace = plimsoll::read_trace(recording);
    else trace_problem = "the program wrote no recording (plimsoll did not start in it: not a Python program?)";
  } catch (const plimsoll::Error& error) {
    trace_problem = error.what();
  }
  out["stats_lost"] = !stats.has_value();
  out["devices"] = stats ? nlohmann::ordered_json((*stats)["devices"]) : (trace ? devices_from_trace(*trace) : nlohmann::ordered_json::array());
  // The step the program's last step() began holds no training, only what ran after it (the program's teardown,
  // which frees everything, leaks included): closing the recording ended it, not a step() call. Left out.
  if (trace && stats && stats->contains("steps") && !trace->steps.empty() &&
      trace->steps.back().number == (*stats)["steps"].get<int>()) {
    trace->steps.pop_back();
  }
  std::optional<plimsoll::telemetry::LeakReport> leak;
  if (trace) leak = plimsoll::telemetry::find_leaks(*trace);
  out["steps"] = leak ? leak->steps : 0;
  out["leak"] = leak && leak->leak();
  out["leak_verdict"] = leak ? plimsoll::telemetry::to_string(leak->verdict) : "too_few_steps";
  out["leak_bytes_per_step"] = leak ? leak->bytes_per_step : 0.0;
  nlohmann::ordered_json sites = nlohmann::ordered_json::array();
  if (leak && leak->leak()) {
    for (const auto& group : leak->groups) {  // most bytes first
      if (group.site == 0 || group.site >= trace->sites.size() || trace->sites[group.site].empty()) continue;
      const std::string& site = trace->sites[group.site];
      if (std::find(sites.begin(), sites.end(), site) == sites.end()) sites.push_back(site);
    }
  }
  out["leak_sites"] = std::move(sites);
  out["ooms"] = stats ? nlohmann::ordered_json((*stats)["ooms"]) : nlohmann::ordered_json::array();
  out["hooks"] = stats ? nlohmann::ordered_json((*stats)["hooks"]) : nlohmann::ordered_json();
  nlohmann::ordered_json notes = stats ? nlohmann::ordered_json((*stats)["notes"]) : nlohmann::ordered_json::array();
  if (!stats) {
    notes.push_back(end.signal != 0 ? fmt::format("the program was ended by signal {} before it could write its stats: "
                                                  "devices and peaks come from the recording", end.signal)
                                    : "the program exited without writing its stats (a crash, or an exit that "
                                      "skipped Python's shutdown): devices and peaks come from the recording");
  }
  if (!trace_problem.empty()) notes.push_back(fmt::format("recording: {}", trace_problem));
  const std::size_t forks = count_notes(run_dir, "fork-");
  const std::size_t spawned = count_notes(run_dir, "subprocess-");
  if (forks + spawned > 0) {
    notes.push_back(fmt::format("{} forked and {} started Python processes ran under the same limits, each on its own "
                                "devices; they are not in this report",
                                forks, spawned));
  }
  out["forked_processes"] = forks;
  out["started_processes"] = spawned;
  out["notes"] = notes;
  out["recording"] = args.record.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(args.record);

  int status = end.exit_status;
  try {
    if (!args.html.empty() && trace) {
      plimsoll::Config config;
      config.log_device_creation = false;
      plimsoll::Runtime runtime(config);
      plimsoll::telemetry::TimelineRecorder recorder(*trace);
      plimsoll::telemetry::ReplayOptions options;
      options.timeline = &recorder;
      const auto result = plimsoll::telemetry::replay(*trace, runtime.device("sim:1TiB"), options);
      plimsoll::telemetry::write_output_file(args.html, plimsoll::telemetry::timeline_html({recorder.finish(result)}),
                                             "--html");
    }
    if (!args.json.empty()) plimsoll::telemetry::write_output_file(args.json, out.dump(2) + "\n", "--json");
  } catch (const plimsoll::Error& error) {
    fmt::print(stderr, "plimsoll run: error: {}\n", error.what());
    status = kUsageError;
  }
  if (args.quiet) return status;

  std::string text = "\nplimsoll run: ";
  text += end.signal != 0 ? fmt::format("the program was ended by signal {}\n", end.signal)
                          : fmt::format("the program exited with status {}\n", end.exit_status);
  text += fmt::format("memory at exit (peaks over the run){}:\n{}", stats ? "" : ", from the recording",
                      device_table(out["devices"]));
  for (const auto& oom : out["ooms"]) text += fmt::format("\nout of memory:\n{}\n", oom.get<std::string>());
  if (leak) {
    text += fmt::format("\nleak watch: {}\n", plimsoll::cli::leak_verdict_line(*leak));
    for (const auto& site : out["leak_sites"]) text += fmt::format("  made at {}\n", site.get<std::string>());
  }
  for (const auto& note : out["notes"]) text += fmt::format("note: {}\n", note.get<std::string>());
  std::fflush(stdout);
  fmt::print(stderr, "{}", text);
  return status;
}

int run(const RunArgs& args) {
  std::vector<plimsoll::cli::RunDevice> devices;
  try {
    devices = plimsoll::cli::parse_run_devices(args.devices, args.memory_limit);
    if (!args.policy.empty()) (void)plimsoll::parse_growth(args.policy);
    (void)plimsoll::parse_size(args.release_threshold);
    if (!args.record.empty()) plimsoll::telemetry::check_writable(args.record, "--record");
    if (!args.html.empty()) plimsoll::telemetry::check_writable(args.html, "--html");
    if (!args.json.empty()) plimsoll::telemetry::check_writable(args.json, "--json");
  } catch (const plimsoll::Error& error) {
    fmt::print(stderr, "plimsoll run: error: {}\n", error.what());
    return kUsageError;
  }
  std::string dir_template = (std::filesystem::temp_directory_path() / "plimsoll-run-XXXXXX").string();
  if (mkdtemp(dir_template.data()) == nullptr) {
    fmt::print(stderr, "plimsoll run: error: cannot make a folder in {}: {}; set TMPDIR to a writable folder\n",
               std::filesystem::temp_directory_path().string(), std::strerror(errno));
    return kUsageError;
  }
  const std::string run_dir = dir_template;
  const std::string recording = args.record.empty() ? run_dir + "/run.plimsoll" : args.record;
  int status = kUsageError;
  try {
    set_child_environment(args, devices, run_dir, recording);
    const ChildEnd end = run_child(args.command);
    status = report(args, end, run_dir, recording);
  } catch (const plimsoll::cli::RunError& error) {
    fmt::print(stderr, "plimsoll run: error: {}\n", error.what());
    status = error.status;
  } catch (const plimsoll::Error& error) {
    fmt::print(stderr, "plimsoll run: error: {}\n", error.what());
  }
  std::error_code ignored;
  std::filesystem::remove_all(run_dir, ignored);
  return status;
}

}  // namespace

namespace plimsoll::cli {
int run_exit_status = -1;
}  // namespace plimsoll::cli

void add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* run_app = app.add_subcommand("run", "Run a Python program (PyTorch, NumPy) with plimsoll underneath and "
                                                "report its memory at exit: plimsoll run [OPTIONS] -- COMMAND [ARGS...]");
  run_app->add_option("--memory-limit", args->memory_limit, "Limit of the host device (cpu)")->type_name("SIZE");
  run_app->add_option("--device", args->devices, "Per-device limits, e.g. cpu=4GiB,cpu/1=1GiB,cuda:0=10GiB (CUDA "
                                                 "needs PyTorch 2.0+)")
      ->type_name("LIST");
  run_app->add_option("--policy", args->policy, "Growth policy of the devices: on_demand or preallocate")
      ->type_name("GROWTH");
  run_app->add_option("--release-threshold", args->release_threshold,
                      "Cached free host memory kept mapped; beyond it freed memory goes back to the kernel")
      ->type_name("SIZE")
      ->default_str(kDefaultHostReleaseThreshold);
  run_app->add_option("--record", args->record, "Keep the run's recording (steps, Python call sites)")
      ->type_name("FILE.plimsoll");
  run_app->add_option("--html", args->html, "Write the run's memory timeline as one HTML file")->type_name("FILE.html");
  run_app->add_option("--json", args->json, "Write the report as one JSON object (keys in docs/python.md)")
      ->type_name("FILE.json");
  run_app->add_flag("--no-call-sites", args->no_call_sites,
                    "Record without call sites (the leak report then names positions in the step, not lines)");
  run_app->add_flag("--quiet", args->quiet, "No report on stderr (--json still written)");
  run_app->add_option("command", args->command, "The program and its arguments, after --")->required();
  run_app->callback([args] { plimsoll::cli::run_exit_status = run(*args); });
}
