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
