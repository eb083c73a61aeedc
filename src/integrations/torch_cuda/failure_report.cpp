// See failure_report.hpp.
#include "integrations/torch_cuda/failure_report.hpp"

#include <cstdio>
#include <exception>

namespace plimsoll::torch_cuda {
namespace {
// last_error(): t_fixed_error when set (a string literal, which keeping cannot fail), t_last_error otherwise.
// Invariant: after a say that keeps, exactly that say's reason or fallback is what last_error() returns.
thread_local std::string t_last_error;
thread_local const char* t_fixed_error = nullptr;

constexpr std::string_view kPrefix = "plimsoll: ";
constexpr const char* kUnexpected = "unexpected failure (out of host memory?)";

void keep_fixed(const char* message) noexcept { t_fixed_error = message; }
}  // namespace

void say(std::string_view text, int device, const char* fallback) noexcept {
  if (text.empty()) {
    std::fprintf(stderr, "plimsoll: %s cuda:%d\n", fallback, device);
    return;
  }
  // The pieces one after the other, under stderr's lock so that another thread's line cannot come between them.
  ::flockfile(stderr);
  if (!text.starts_with("plimsoll:")) std::fwrite(kPrefix.data(), 1, kPrefix.size(), stderr);
  std::fwrite(text.data(), 1, text.size(), stderr);
  if (!text.ends_with('\n')) std::fputc('\n', stderr);
  ::funlockfile(stderr);
}

void say(const std::string& why, const char* fallback) noexcept {
  if (why.empty()) {
    keep_fixed(fallback);
    std::fprintf(stderr, "plimsoll: %s\n", fallback);
    return;
  }
  try {
    t_last_error = why;
    t_fixed_error = nullptr;
  } catch (...) {
    keep_fixed(fallback);  // never the earlier reason that t_last_error may still hold
  }
  std::fprintf(stderr, "plimsoll: %s\n", why.c_str());
}

void say_unexpected(const char* action, int device) noexcept {
  try {
    throw;
  } catch (const std::exception& error) {
    try {
      const std::string where = device < 0 ? "the device holding it" : "cuda:" + std::to_string(device);
      say(std::string("cannot ") + action + " " + where + ": " + error.what(), kUnexpected);
      return;
    } catch (...) {
    }
  } catch (...) {
  }
  keep_fixed(kUnexpected);
  if (device < 0) std::fprintf(stderr, "plimsoll: cannot %s the device holding it: unexpected failure\n", action);
  else std::fprintf(stderr, "plimsoll: cannot %s cuda:%d: unexpected failure\n", action, device);
}

const char* last_error() noexcept { return t_fixed_error != nullptr ? t_fixed_error : t_last_error.c_str(); }

}  // namespace plimsoll::torch_cuda
