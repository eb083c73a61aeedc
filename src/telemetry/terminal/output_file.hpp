#pragma once
// Files the CLI writes besides stdout (timelines): checked before the work that fills them, written whole.
#include <string>
#include <string_view>

namespace plimsoll::telemetry {

/// Throws InvalidArgument naming `path`, the `option` it came from and the fix when no file can be written
/// there: its folder is missing or not a folder, the path is a folder, or it is not writable. Called before a
/// long replay, so a typo fails at once.
void check_writable(const std::string& path, std::string_view option);
/// Writes `text` to `path`, replacing what was there; InvalidArgument as above when that fails.
void write_output_file(const std::string& path, std::string_view text, std::string_view option);

}  // namespace plimsoll::telemetry
