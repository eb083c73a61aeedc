#include "telemetry/terminal/output_file.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "plimsoll/error.hpp"

namespace plimsoll::telemetry {
namespace {

InvalidArgument unwritable(const std::string& path, std::string_view option, std::string_view why) {
  return InvalidArgument(fmt::format("cannot write {} {}: {}; pass {} a file in a folder that exists and that "
                                     "you can write to",
                                     option, path, why, option));
}

}  // namespace

void check_writable(const std::string& path, std::string_view option) {
  if (path.empty()) throw unwritable(path, option, "the path is empty");
  namespace fs = std::filesystem;
  const fs::path file(path);
  const fs::path folder = file.has_parent_path() ? file.parent_path() : fs::path(".");
  std::error_code error;
  if (!fs::exists(folder, error)) throw unwritable(path, option, fmt::format("the folder {} does not exist", folder.string()));
  if (!fs::is_directory(folder, error)) throw unwritable(path, option, fmt::format("{} is not a folder", folder.string()));
  if (fs::is_directory(file, error)) throw unwritable(path, option, "it is a folder");
  const bool exists = fs::exists(file, error);
  if (::access(exists ? path.c_str() : folder.c_str(), W_OK) != 0) {
    throw unwritable(path, option, fmt::format("{} ({})", exists ? "the file is not writable" : "the folder is not writable",
                                               std::strerror(errno)));
  }
}

void write_output_file(const std::string& path, std::string_view text, std::string_view option) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw unwritable(path, option, std::strerror(errno));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) throw unwritable(path, option, "writing failed (is the disk full?)");
}

}  // namespace plimsoll::telemetry
