// Must not compile: the engine reports through engine::AllocationObserver, never the recorder.
#include "telemetry/recording/recorder.hpp"
