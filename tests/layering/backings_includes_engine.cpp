// Must not compile: backings sit below the engine.
#include "backings/backing.hpp"
#include "engine/heap.hpp"
