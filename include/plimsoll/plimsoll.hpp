#pragma once
// Everything a C++ user of plimsoll needs. The C ABI is plimsoll.h.
#include "plimsoll/allocator.hpp"
#include "plimsoll/device.hpp"
#include "plimsoll/error.hpp"
#include "plimsoll/estimate.hpp"
#include "plimsoll/oom.hpp"
#include "plimsoll/policy.hpp"
#include "plimsoll/recording.hpp"
#include "plimsoll/runtime.hpp"
#include "plimsoll/size.hpp"
#include "plimsoll/stats.hpp"
#include "plimsoll/trace.hpp"
