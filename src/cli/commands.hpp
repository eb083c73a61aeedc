#pragma once
// The `plimsoll` subcommands. Each file registers one subcommand, its options and its action on the app; main()
// only parses and turns plimsoll::Error into "plimsoll: error: ..." with exit status 2.
namespace CLI {
class App;
}  // namespace CLI

/// `plimsoll replay TRACE...`: replays allocation traces against a device (src/cli/replay_command.cpp).
void add_replay_command(CLI::App& app);
/// `plimsoll devices`: lists the devices and why GPUs are or are not visible (src/cli/devices_command.cpp).
void add_devices_command(CLI::App& app);
/// `plimsoll leaks TRACE`: the leak watch on a trace (src/cli/leaks_command.cpp).
void add_leaks_command(CLI::App& app);
/// `plimsoll estimate batch|table`: memory of input batches and prefetch queues (src/cli/estimate_command.cpp).
void add_estimate_command(CLI::App& app);
/// `plimsoll train`: the main job, a network trained on Fashion-MNIST under plimsoll (src/cli/train_command.cpp).
void add_train_command(CLI::App& app);
/// `plimsoll plan TRACE...`: peak memory at any batch size and the largest batch that fits (src/cli/plan_command.cpp).
void add_plan_command(CLI::App& app);
/// `plimsoll run-plan TRACE -o PLAN`: a run plan packed offline from a trace (src/cli/run_plan_command.cpp).
void add_run_plan_command(CLI::App& app);
/// `plimsoll top`: every GPU ledger and its governed processes, live (src/cli/top_command.cpp).
void add_top_command(CLI::App& app);
/// `plimsoll pause PID` / `plimsoll resume PID`: a governed job's GPU memory given back and mapped back
/// (src/cli/pause_command.cpp).
void add_pause_commands(CLI::App& app);
/// `plimsoll run -- COMMAND`: a Python program under plimsoll, reported on at exit (src/cli/run_command.cpp).
void add_run_command(CLI::App& app);
namespace plimsoll::cli {
/// The exit status `plimsoll run` chose (the child's, or 125/126/127); -1 when `run` did not run.
extern int run_exit_status;
/// What `plimsoll run` exits with when its own options cannot be parsed.
inline constexpr int kRunUsageStatus = 125;
}  // namespace plimsoll::cli
