// Must not compile: telemetry does not know how devices are budgeted.
#include "runtime/device_plan.hpp"
