// `plimsoll pause PID` / `plimsoll resume PID`: give a governed job's GPU memory back without ending it, and map it
// back (docs/sharing.md, "Pause and resume"). A request through the job's ledger entries, answered by the job.
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/option_values.hpp"
#include "plimsoll/sharing.hpp"

namespace {

struct ControlOptions {
  int pid = 0;
  bool keep_contents = false;
  std::string timeout = "5";  // seconds, checked by parse_number (cli/option_values.hpp)
  bool json = false;
  std::string ledger_dir;
};

// Prints each GPU's answer; the exit status: 0 all done, 1 some refused, 2 some not answered (the process left, or
// the time ran out).
int report(const char* action, int pid, const std::vector<plimsoll::ControlOutcome>& outcomes, bool json) {
  bool all_done = true, all_answered = true;
  nlohmann::json gpus = nlohmann::json::array();
  for (const plimsoll::ControlOutcome& outcome : outcomes) {
    all_done = all_done && outcome.done;
    all_answered = all_answered && outcome.answered;
    const char* state = outcome.done ? "done" : outcome.answered ? "refused" : "no answer";
    gpus.push_back({{"uuid", outcome.gpu_uuid}, {"done", outcome.done}, {"answered", outcome.answered},
                    {"message", outcome.message}});
    if (!json) fmt::print("{} {}: {}\n", outcome.gpu_uuid, state, outcome.message);
  }
  if (json) fmt::print("{}\n", nlohmann::json{{"pid", pid}, {"action", action}, {"done", all_done}, {"gpus", gpus}}.dump(2));
  std::fflush(stdout);
  return !all_answered ? 2 : !all_done ? 1 : 0;
}

// Runs the request and reports it; a timeout reports what was answered, then its reason (exit status 2).
void control(const char* action, int pid, bool json,
             const std::function<std::vector<plimsoll::ControlOutcome>()>& send) {
  int status = 0;
  try {
    status = report(action, pid, send(), json);
  } catch (const plimsoll::ControlTimeout& timeout) {
    report(action, pid, timeout.outcomes(), json);
    throw;
  }
  if (status != 0) throw CLI::RuntimeError(status);  // each GPU's reason is printed above
}

CLI::App* add_control(CLI::App& app, const char* name, const char* description,
                      const std::shared_ptr<ControlOptions>& options) {
  CLI::App* command = app.add_subcommand(name, description);
  command->add_option("PID", options->pid, "the governed process (as `plimsoll top` lists it)")->required();
  command->add_option("--timeout", options->timeout,
                      "seconds to wait for the process to answer, from 0.01 to 3600 (default 5)")
      ->type_name("SECONDS");
  command->add_flag("--json", options->json, "one JSON object: pid, action, done, and each GPU's answer");
  command->add_option("--ledger-dir", options->ledger_dir,
                      "where the ledgers are (default $PLIMSOLL_LEDGER_DIR, else /dev/shm)");
  return command;
}

std::chrono::milliseconds timeout_of(const ControlOptions& options) {
  const double seconds = plimsoll::cli::parse_number(options.timeout, "--timeout",
                                                     {.minimum = 0.01, .minimum_excluded = false, .maximum = 3600.0});
  return std::chrono::milliseconds(static_cast<long>(seconds * 1000.0));
}

std::string dir_of(const ControlOptions& options) {
  return options.ledger_dir.empty() ? plimsoll::ledger_directory() : options.ledger_dir;
}

}  // namespace

void add_pause_commands(CLI::App& app) {
  auto pause_options = std::make_shared<ControlOptions>();
  CLI::App* pause = add_control(app, "pause", "give a governed job's GPU memory back without ending it",
                                pause_options);
  pause->add_flag("--keep-contents", pause_options->keep_contents,
                  "copy the job's live GPU memory to host memory first, and back on resume");
  pause->callback([pause_options] {
    const std::chrono::milliseconds timeout = timeout_of(*pause_options);  // a bad value is refused before asking
    control("pause", pause_options->pid, pause_options->json, [&] {
      return plimsoll::request_pause(pause_options->pid, pause_options->keep_contents, timeout,
                                     dir_of(*pause_options));
    });
  });
  auto resume_options = std::make_shared<ControlOptions>();
  CLI::App* resume = add_control(app, "resume", "map a paused job's GPU memory back at the same addresses",
                                 resume_options);
  resume->callback([resume_options] {
    const std::chrono::milliseconds timeout = timeout_of(*resume_options);
    control("resume", resume_options->pid, resume_options->json, [&] {
      return plimsoll::request_resume(resume_options->pid, timeout, dir_of(*resume_options));
    });
  });
}
