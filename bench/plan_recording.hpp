#pragma once
// A recording of plimsoll's "cpu" device (Runtime::global()) for the C++17 recording programs of `plimsoll plan`'s
// accuracy benchmark (plan_resnet18_record.cpp): the C++20 side (plan_recording.cpp) behind plain std types.
#include <string>

namespace plimsoll::bench::plan_recording {

/// Opens `path` with call sites, attaches it to the "cpu" device and writes `job_marker` ("model ... batch N").
void begin(const std::string& path, const std::string& job_marker);
/// Detaches and closes the recording (ending the open step).
void end();

}  // namespace plimsoll::bench::plan_recording
