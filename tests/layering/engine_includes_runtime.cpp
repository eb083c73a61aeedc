// Must not compile: the engine sits below the runtime (cmake/Layers.cmake).
#include "runtime/budget.hpp"
