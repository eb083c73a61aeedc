// Must not compile: the engine sits below the shells.
#include "cli/commands.hpp"
