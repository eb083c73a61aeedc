// Must not compile: the engine sits below the main job.
#include "train/train_job.hpp"
