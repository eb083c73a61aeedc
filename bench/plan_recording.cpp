#include "plan_recording.hpp"

#include <memory>
#include <string>

#include "plimsoll/recording.hpp"
#include "plimsoll/runtime.hpp"

namespace plimsoll::bench::plan_recording {
namespace {
std::shared_ptr<Recording>& current() {
  static std::shared_ptr<Recording> recording;
  return recording;
}
}  // namespace

void begin(const std::string& path, const std::string& job_marker) {
  current() = Recording::open(path, {.call_sites = true});
  Runtime::global().device("cpu").record_to(current());
  current()->marker(job_marker);
}

void end() {
  Runtime::global().device("cpu").record_to(nullptr);
  current()->close();
  current().reset();
}

}  // namespace plimsoll::bench::plan_recording
