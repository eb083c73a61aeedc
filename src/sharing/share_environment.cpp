// The environment a governed child needs: what `plimsoll run --device cuda:N=SHARE[:CAP]` sets.
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plimsoll/error.hpp"
#include "plimsoll/sharing.hpp"

namespace plimsoll {

std::string default_interceptor_path() {
  if (const char* explicit_path = std::getenv("PLIMSOLL_CUDA_INTERCEPT"); explicit_path != nullptr && *explicit_path)
    return explicit_path;
  std::error_code error;
  for (const char* candidate : {PLIMSOLL_INTERCEPT_BUILD_PATH, PLIMSOLL_INTERCEPT_INSTALL_PATH})
    if (std::filesystem::exists(candidate, error)) return candidate;
  throw InvalidArgument(fmt::format("libplimsoll_cuda_intercept.so was found neither in the build tree ({}) nor "
                                    "installed ({}): build the target plimsoll_cuda_intercept, or set "
                                    "PLIMSOLL_CUDA_INTERCEPT to its path", PLIMSOLL_INTERCEPT_BUILD_PATH,
                                    PLIMSOLL_INTERCEPT_INSTALL_PATH));
}

std::string ledger_directory() {
  const char* dir = std::getenv("PLIMSOLL_LEDGER_DIR");
  return dir != nullptr && *dir ? std::string(dir) : std::string("/dev/shm");
}

std::vector<std::pair<std::string, std::string>> sharing_environment(const std::vector<ShareSpec>& specs,
                                                                     std::string_view current_ld_preload,
                                                                     std::string_view ledger_dir,
                                                                     std::string interceptor) {
  if (specs.empty()) throw InvalidArgument("no GPU share given: write cuda:N=SHARE[:CAP], e.g. cuda:0=8GiB:16GiB");
  if (interceptor.empty()) interceptor = default_interceptor_path();
  std::string preload = interceptor;
  if (!current_ld_preload.empty()) preload += fmt::format(":{}", current_ld_preload);
  std::vector<std::string> parts;
  for (const ShareSpec& spec : specs) parts.push_back(spec.str());
  const std::string shares = fmt::format("{}", fmt::join(parts, ","));
  std::vector<std::pair<std::string, std::string>> environment = {{"LD_PRELOAD", preload}, {"PLIMSOLL_SHARE", shares}};
  if (!ledger_dir.empty()) environment.emplace_back("PLIMSOLL_LEDGER_DIR", std::string(ledger_dir));
  return environment;
}

}  // namespace plimsoll
