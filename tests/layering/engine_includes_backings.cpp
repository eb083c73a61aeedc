// Must compile: the control for the probes above (a layer includes what it declares), so that their failure is
// the missing header and not the setup.
#include "backings/backing.hpp"
#include "engine/heap.hpp"
#include "util/checked_math.hpp"

int plimsoll_layering_probe_allowed() { return 0; }
