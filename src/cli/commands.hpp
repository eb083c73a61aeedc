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
/// `plimsoll top`: every GPU ledger and its governed processes, live (src/cli/top_command.cpp).
void add_top_command(CLI::App& app);
