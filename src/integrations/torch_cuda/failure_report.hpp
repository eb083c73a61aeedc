#pragma once
// How libplimsoll_torch_cuda.so's C functions report a failure: on stderr, and, for the calls that return -1 with a
// reason (pause, resume, is_paused, record_stream), kept for plimsoll_torch_cuda_last_error(). Reports come when
// host memory may be what ran out, so none of these throws, the printing allocates nothing, and a reason that cannot
// be kept is replaced by a fixed text (a string literal): last_error() is never "" after a failure and never an
// earlier failure's reason. Here rather than in torch_cuda.cpp so that a test can link it and fail its allocations
// (tests/integrations_torch_cuda_report_test.cpp).
#include <string>
#include <string_view>

namespace plimsoll::torch_cuda {

/// A failure of malloc or free (not kept): prints "plimsoll: " unless `text` starts with it already (the OOM report
/// does), then `text`, then a newline unless `text` ends with one; "plimsoll: <fallback> cuda:<device>" when `text`
/// is empty (its reason could not be copied). Allocates nothing.
void say(std::string_view text, int device, const char* fallback) noexcept;

/// A failure with a reason for the caller: prints "plimsoll: <why>" and keeps `why` for last_error(); `fallback` (a
/// string literal, kept by address) when `why` is empty or cannot be copied.
void say(const std::string& why, const char* fallback) noexcept;

/// An unexpected exception (bad_alloc building a reason, a lock failure), to be called from inside the handler that
/// caught it: "cannot <action> cuda:<device>: <what()>" (device < 0: "the device holding it"), or, when that
/// cannot be built, the same with "unexpected failure" and a fixed reason kept.
void say_unexpected(const char* action, int device) noexcept;

/// This thread's last kept reason ("" before any); valid until this thread's next say.
const char* last_error() noexcept;

}  // namespace plimsoll::torch_cuda
