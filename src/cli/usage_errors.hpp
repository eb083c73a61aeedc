#pragma once
// How the CLI words CLI11's own usage errors. CLI11 converts the numeric options plimsoll does not parse itself
// (--lr, --seed, ...), and its message for a value that does not convert ("Could not convert: --lr = x") names the
// option and the value but not what the option takes; this one does, from the option's type.
#include <string>

#include <CLI/CLI.hpp>

namespace plimsoll::cli {

/// For CLI::App::failure_message: a value CLI11 could not convert becomes `--lr "x" is not a number; give --lr a
/// number (see plimsoll train --help)`; every other error reads as CLI11 writes it.
std::string usage_failure_message(const CLI::App* app, const CLI::Error& error);

}  // namespace plimsoll::cli
