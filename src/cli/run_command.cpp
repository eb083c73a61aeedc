// `plimsoll run [OPTIONS] -- COMMAND [ARGS...]`: runs a Python program with plimsoll underneath and reports on its
// memory when it exits (docs/python.md). This file: the options, the child's environment, starting and waiting for
// it; the report is run_report.cpp.
//
// Exit status: the child's (128 + N when a signal N ended it); plimsoll's own: 125 (bad option or input, or a
// report that could not be written), 126 (COMMAND cannot be executed), 127 (COMMAND not found).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/option_values.hpp"
#include "cli/run_devices.hpp"
#include "cli/run_report.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/sharing.hpp"
#include "plimsoll/size.hpp"
#include "telemetry/terminal/output_file.hpp"

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
  bool release_threshold_given = false;
  std::vector<std::string> command;
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
  // GPUs with a share: the driver interposer is preloaded, so any framework's memory on them is charged to the share
  // in the GPU's ledger (docs/sharing.md), whatever allocator the program uses.
  std::vector<plimsoll::ShareSpec> shares;
  for (const plimsoll::cli::RunDevice& device : devices) {
    if (!device.share_spec.empty()) shares.push_back(plimsoll::parse_share_spec(device.share_spec));
  }
  if (!shares.empty()) {
    const char* preload = std::getenv("LD_PRELOAD");
    for (const auto& [name, value] : plimsoll::sharing_environment(shares, preload != nullptr ? preload : "")) {
      setenv(name.c_str(), value.c_str(), 1);
    }
  }
  setenv("PLIMSOLL_RUN_GROWTH", args.policy.c_str(), 1);
  setenv("PLIMSOLL_RUN_SITES", args.no_call_sites ? "0" : "1", 1);
  // run's default threshold gives way to one the user set in the environment; an explicit option does not.
  const char* user_threshold = std::getenv("PLIMSOLL_RELEASE_THRESHOLD");
  const bool keep_users = !args.release_threshold_given && user_threshold != nullptr && *user_threshold != '\0';
  setenv("PLIMSOLL_RUN_RELEASE",
         keep_users ? "" : fmt::format("{}", plimsoll::parse_size(args.release_threshold)).c_str(), 1);
}

volatile sig_atomic_t child_pid = 0;

void forward_to_child(int signal_number) {
  if (child_pid > 0) kill(static_cast<pid_t>(child_pid), signal_number);
}

// fork + exec; an exec failure comes back through a close-on-exec pipe as errno.
plimsoll::cli::ChildEnd run_child(const std::vector<std::string>& command) {
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
  // The terminal's Ctrl-C reaches the child (same process group); `run` waits for it and still reports. A SIGTERM
  // or SIGHUP sent to `run` alone (a job scheduler stopping it) is passed to the child, and the report still comes.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction forward {};
  forward.sa_handler = forward_to_child;
  struct sigaction old_int {}, old_term {}, old_hup {};
  child_pid = pid;
  sigaction(SIGINT, &ignore, &old_int);
  sigaction(SIGTERM, &forward, &old_term);
  sigaction(SIGHUP, &forward, &old_hup);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  if (got == static_cast<ssize_t>(sizeof exec_error)) {
    const bool missing = exec_error == ENOENT;
    throw plimsoll::cli::RunError(missing ? kNotFound : kCannotExecute,
                                  fmt::format("cannot run {}: {}{}", command[0], std::strerror(exec_error),
                                              missing ? "; check the name, or give its path" : ""));
  }
  if (WIFSIGNALED(status)) return {128 + WTERMSIG(status), WTERMSIG(status)};
  return {WEXITSTATUS(status), 0};
}

int run(const RunArgs& args) {
  std::vector<plimsoll::cli::RunDevice> devices;
  try {
    devices = plimsoll::cli::parse_run_devices(args.devices, args.memory_limit);
    if (!args.policy.empty()) {
      (void)plimsoll::cli::for_option("--policy", [&] { return plimsoll::parse_growth(args.policy); });
    }
    (void)plimsoll::cli::for_option("--release-threshold",
                                    [&] { return plimsoll::parse_size(args.release_threshold); });
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
    const plimsoll::cli::ChildEnd end = run_child(args.command);
    const plimsoll::cli::RunOutputs outputs{args.record, args.html, args.json, args.quiet};
    status = plimsoll::cli::report_run(outputs, end, run_dir, recording);
  } catch (const plimsoll::cli::RunError& error) {
    fmt::print(stderr, "plimsoll run: error: {}\n", error.what());
    status = error.status;
  } catch (const plimsoll::Error& error) {
    fmt::print(stderr, "plimsoll run: error: {}\n", error.what());
  } catch (const std::exception& error) {
    // Not bad input but a fault of plimsoll's own: still a distinct status, and the folder below still removed.
    fmt::print(stderr, "plimsoll run: internal error: {}\n", error.what());
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
  run_app->add_option("--device", args->devices,
                      "Per-device limits, e.g. cpu=4GiB,cpu/1=1GiB,cuda:0=10GiB; a GPU's entry is SHARE[:CAP] "
                      "(sizes or % of the GPU), enforced at the CUDA driver for any framework (docs/sharing.md), "
                      "and with PyTorch 2.0+ its tensors also come from plimsoll")
      ->type_name("LIST");
  run_app->add_option("--policy", args->policy, "Growth policy of the devices: on_demand or preallocate")
      ->type_name("GROWTH");
  run_app->add_option("--release-threshold", args->release_threshold,
                      "Cached free host memory kept mapped; beyond it freed memory goes back to the kernel")
      ->type_name("SIZE")
      ->default_str(kDefaultHostReleaseThreshold)
      ->each([args](const std::string&) { args->release_threshold_given = true; });
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
