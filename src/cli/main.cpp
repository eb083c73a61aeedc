// The plimsoll command line: subcommands from commands.hpp, one error path for all of them.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "plimsoll/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"plimsoll: memory budgets and allocation telemetry for deep-learning devices", "plimsoll"};
  app.require_subcommand(1);
  add_replay_command(app);
  add_devices_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
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
  return 0;
}
