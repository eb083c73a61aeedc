// The plimsoll command line: subcommands from commands.hpp, one error path for all of them.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/usage_errors.hpp"
#include "plimsoll/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"plimsoll: memory budgets and allocation telemetry for deep-learning devices", "plimsoll"};
  app.require_subcommand(1);
  add_train_command(app);
  add_replay_command(app);
  add_devices_command(app);
  add_leaks_command(app);
  add_estimate_command(app);
  add_plan_command(app);
  add_run_plan_command(app);
  add_top_command(app);
  add_pause_commands(app);
  add_run_command(app);
  app.failure_message(plimsoll::cli::usage_failure_message);

  // Arguments in reverse order, as CLI11's vector overload takes them. The (argc, argv) overload would do the
  // same, but GCC 12 at -O2 reports a false null dereference inside it, which -Werror turns into a failure.
  std::vector<std::string> arguments(argv + 1, argv + argc);
  std::reverse(arguments.begin(), arguments.end());
  try {
    app.parse(arguments);
  } catch (const CLI::RuntimeError& error) {
    // A command's own status (out of memory 3, a refused pause 1, ...), its reason already printed.
    return app.exit(error);
  } catch (const CLI::ParseError& error) {
    // CLI11 prints the message; its own statuses (105 for a value out of range, 106 for a wrong type, ...) would
    // make every usage error look different to a script, so all of them are bad input: 2, as elsewhere.
    if (app.exit(error) == 0) return 0;  // --help
    // `run` passes its child's status on, so its own usage errors need a status no program gives by accident.
    const bool in_run = app.get_subcommand("run")->parsed() > 0;
    return in_run ? plimsoll::cli::kRunUsageStatus : 2;
  } catch (const plimsoll::Error& error) {
    // Bad input (a trace line, a size, a device string): the message already says what to fix.
    std::fflush(stdout);
    fmt::print(stderr, "plimsoll: error: {}\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fflush(stdout);
    fmt::print(stderr, "plimsoll: internal error: {}\n", error.what());
    return 1;
  }
  return plimsoll::cli::run_exit_status >= 0 ? plimsoll::cli::run_exit_status : 0;
}
