// ProcessGroup (process_group.hpp) in a build without Gloo's headers: every multi-process run is refused with the fix.
#include "train/process_group.hpp"

namespace plimsoll::train {

struct ProcessGroup::Impl {};

ProcessGroup::ProcessGroup(const ProcessGroupOptions&) {
  throw InvalidArgument(
      "this plimsoll was built without Gloo's headers, which training over several processes needs: run "
      "scripts/install-deps.sh (it installs Debian's libgloo-dev), then configure and build again");
}
ProcessGroup::~ProcessGroup() = default;
int ProcessGroup::rank() const noexcept { return 0; }
int ProcessGroup::world_size() const noexcept { return 1; }
void ProcessGroup::average(Replica&) {}
bool ProcessGroup::replicas_identical(const Replica&) { return true; }
std::vector<double> ProcessGroup::sum(const std::vector<double>& values) { return values; }
std::vector<std::string> ProcessGroup::gather_on_root(const std::string&) { return {}; }
void ProcessGroup::announce_failure(const std::string&) {}

}  // namespace plimsoll::train
