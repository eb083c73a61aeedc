// `plimsoll top`: every GPU ledger and governed process, live (docs/sharing.md). Reads the ledgers only.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/option_values.hpp"
#include "cli/top_view.hpp"
#include "plimsoll/sharing.hpp"

void add_top_command(CLI::App& app) {
  struct Options {
    bool once = false;
    bool json = false;
    std::string ledger_dir;
    std::string interval = "1";  // seconds, checked by parse_number (cli/option_values.hpp)
  };
  auto options = std::make_shared<Options>();
  CLI::App* top = app.add_subcommand("top", "every GPU shared under plimsoll and its governed processes, live");
  top->add_flag("--once", options->once, "print one snapshot and exit");
  top->add_flag("--json", options->json, "one JSON object with a `gpus` list (implies --once)");
  top->add_option("--ledger-dir", options->ledger_dir,
                  "where the ledgers are (default $PLIMSOLL_LEDGER_DIR, else /dev/shm)");
  top->add_option("--interval", options->interval, "seconds between refreshes, from 0.05 to 3600 (default 1)")
      ->type_name("SECONDS");
  top->callback([options] {
    const double interval_seconds = plimsoll::cli::parse_number(
        options->interval, "--interval", {.minimum = 0.05, .minimum_excluded = false, .maximum = 3600.0});
    const std::string dir = options->ledger_dir.empty() ? plimsoll::ledger_directory() : options->ledger_dir;
    for (;;) {
      const auto readings = plimsoll::sharing::read_ledgers(dir);
      bool unreadable = false;
      for (const auto& reading : readings) unreadable = unreadable || !reading.snapshot;
      if (options->json) {
        fmt::print("{}\n", plimsoll::cli::top_json(readings, dir).dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
      } else {
        if (!options->once && ::isatty(STDOUT_FILENO)) fmt::print("\x1b[H\x1b[2J");
        fmt::print("{}", plimsoll::cli::top_text(readings, dir));
      }
      std::fflush(stdout);
      if (options->once || options->json) {
        if (unreadable) throw CLI::RuntimeError(1);  // the reason is in the output above
        return;
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(interval_seconds));
    }
  });
}
